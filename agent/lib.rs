pub mod bpf;
