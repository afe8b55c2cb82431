//! Loading `bpf/xid.bpf.c` onto the driver's XID tracepoint.
//!
//! The record layout is taken from the tracepoint's format file and handed to the program as
//! rodata, so the program follows the driver instead of assuming offsets. Where the tracepoint
//! does not exist (no NVIDIA driver, or one without it) [`load`] says why and returns `None`;
//! the agent goes on with the other sources.

use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::path::Path;

use anyhow::{bail, Context};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject, TracepointCategory};

use crate::bpf::xid::{XidSkel, XidSkelBuilder};
use crate::sources::xid_config::XidSourceConfig;

/// One field of a tracepoint record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// Byte offset in the record.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// True for `__data_loc` (dynamic string) fields.
    pub data_loc: bool,
}

/// Parses the `field:` lines of a tracepoint format file into name -> layout.
pub fn parse_format(text: &str) -> HashMap<String, FieldLayout> {
    text.lines()
        .filter_map(|line| {
            let mut declaration = None;
            let mut offset = None;
            let mut size = None;
            for part in line.trim().split(';') {
                let part = part.trim();
                if let Some(decl) = part.strip_prefix("field:") {
                    declaration = Some(decl.trim());
                } else if let Some(value) = part.strip_prefix("offset:") {
                    offset = value.parse::<u32>().ok();
                } else if let Some(value) = part.strip_prefix("size:") {
                    size = value.parse::<u32>().ok();
                }
            }
            let declaration = declaration?;
            let name = declaration.rsplit(' ').next()?.trim_end_matches("[]");
            let name = name.split('[').next()?.to_string();
            Some((
                name,
                FieldLayout {
                    offset: offset?,
                    size: size?,
                    data_loc: declaration.starts_with("__data_loc"),
                },
            ))
        })
        .collect()
}

/// The loaded program and its attachment; dropping it detaches.
pub struct XidTracepoint<'obj> {
    /// The skeleton (maps are read by the consumer).
    pub skel: XidSkel<'obj>,
    link: RefCell<Option<Link>>,
}

impl XidTracepoint<'_> {
    /// Detaches the program; the ring can still be drained afterwards.
    pub fn detach(&self) {
        self.link.borrow_mut().take();
    }
}

/// Loads and attaches the XID program, or explains (as the `Err` of the inner result) why this
/// host has no such tracepoint.
pub fn load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &XidSourceConfig,
    tracefs: &Path,
) -> anyhow::Result<Result<XidTracepoint<'obj>, String>> {
    let Some((category, name)) = config.tracepoint_name.split_once(':') else {
        bail!(
            "tracepoint name {:?} is not category:name",
            config.tracepoint_name
        );
    };
    let format_path = tracefs
        .join("events")
        .join(category)
        .join(name)
        .join("format");
    let text = match std::fs::read_to_string(&format_path) {
        Ok(text) => text,
        Err(err) => {
            return Ok(Err(format!(
                "tracepoint {}:{} is not present ({}: {err}); the NVIDIA driver is not loaded or does not provide it",
                category,
                name,
                format_path.display()
            )))
        }
    };
    let fields = parse_format(&text);
    let field = |wanted: &str, data_loc: bool| -> anyhow::Result<u32> {
        let layout = fields
            .get(wanted)
            .with_context(|| format!("{} has no field {wanted:?}", format_path.display()))?;
        if layout.data_loc != data_loc || layout.size != 4 {
            bail!(
                "{} field {wanted:?} has an unexpected layout {layout:?}",
                format_path.display()
            );
        }
        Ok(layout.offset)
    };
    let names = &config.tracepoint_fields;
    let dev = field(&names.dev, true)?;
    let error_code = field(&names.error_code, false)?;
    let msg = field(&names.msg, true)?;

    let mut open = XidSkelBuilder::default()
        .open(storage)
        .context("opening the XID BPF object")?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("XID program has no rodata")?;
    rodata.dev_field_offset = dev;
    rodata.error_code_field_offset = error_code;
    rodata.msg_field_offset = msg;
    let skel = open.load().context("loading the XID BPF program")?;
    let link = skel
        .progs
        .handle_nvidia_dev_xid
        .attach_tracepoint(TracepointCategory::Custom(category.to_string()), name)
        .with_context(|| format!("attaching to tracepoint {category}:{name}"))?;
    tracing::info!(tracepoint = %config.tracepoint_name, dev, error_code, msg, "XID tracepoint attached");
    Ok(Ok(XidTracepoint {
        skel,
        link: RefCell::new(Some(link)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format the GPU machine's driver 580 shows (see docs/gpu-verification.md).
    const NVIDIA_FORMAT: &str = "name: nvidia_dev_xid
ID: 1234
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] dev;\toffset:8;\tsize:4;\tsigned:0;
\tfield:u32 error_code;\toffset:12;\tsize:4;\tsigned:0;
\tfield:__data_loc char[] msg;\toffset:16;\tsize:4;\tsigned:0;

print fmt: \"Xid (PCI:%s): %u, %s\", __get_str(dev), REC->error_code, __get_str(msg)
";

    #[test]
    fn parses_the_nvidia_format() {
        let fields = parse_format(NVIDIA_FORMAT);
        assert_eq!(
            fields["dev"],
            FieldLayout {
                offset: 8,
                size: 4,
                data_loc: true
            }
        );
        assert_eq!(
            fields["error_code"],
            FieldLayout {
                offset: 12,
                size: 4,
                data_loc: false
            }
        );
        assert_eq!(
            fields["msg"],
            FieldLayout {
                offset: 16,
                size: 4,
                data_loc: true
            }
        );
        assert_eq!(fields["common_pid"].offset, 4);
    }

    #[test]
    #[cfg_attr(
        not(feature = "root-tests"),
        ignore = "needs root: `make test` runs it"
    )]
    fn absent_tracepoint_is_explained_not_fatal() {
        let root = crate::sources::tracefs::ensure_mounted().expect("tests run as root");
        let mut storage = MaybeUninit::uninit();
        let config = XidSourceConfig {
            tracepoint_name: "nvidia:nvidia_dev_xid_absent".into(),
            ..Default::default()
        };
        let outcome = load(&mut storage, &config, &root).unwrap();
        let reason = outcome.err().expect("no such tracepoint here");
        assert!(
            reason.contains("nvidia:nvidia_dev_xid_absent is not present"),
            "{reason}"
        );
    }
}
