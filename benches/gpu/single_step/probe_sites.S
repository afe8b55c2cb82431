/* Functions whose first instruction differs, for timing a uprobe on each (single_step.sh):
 * push, nop and nop5 are emulated by the kernel at the breakpoint; endbr64, mov and sub are
 * single-stepped out of line, which costs a second trap. */
.text
.globl f_push; .type f_push,@function
f_push: push %rbp; pop %rbp; xor %eax,%eax; ret
.size f_push, .-f_push
.globl f_endbr; .type f_endbr,@function
f_endbr: endbr64; push %rbp; pop %rbp; xor %eax,%eax; ret
.size f_endbr, .-f_endbr
.globl f_mov; .type f_mov,@function
f_mov: mov %rdi,%rax; xor %eax,%eax; ret
.size f_mov, .-f_mov
.globl f_sub; .type f_sub,@function
f_sub: sub $8,%rsp; add $8,%rsp; xor %eax,%eax; ret
.size f_sub, .-f_sub
.globl f_nop; .type f_nop,@function
f_nop: nop; xor %eax,%eax; ret
.size f_nop, .-f_nop
.globl f_nop5; .type f_nop5,@function
f_nop5: .byte 0x0f,0x1f,0x44,0x00,0x00; xor %eax,%eax; ret
.size f_nop5, .-f_nop5
.globl f_movrsp; .type f_movrsp,@function
f_movrsp: mov %rsp,%rax; xor %eax,%eax; ret
.size f_movrsp, .-f_movrsp
