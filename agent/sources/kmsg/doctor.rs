//! `gpuship doctor`'s check of the kernel-log source: the configured device opened for
//! reading, or the cause of the error.

use super::reader::{KmsgReader, StartAt};
use crate::diagnosis::{Cause, Check};
use crate::sources::xid_config::XidSourceConfig;

/// The kernel-log check of `[sources.xid]`.
pub fn checks(xid: &XidSourceConfig) -> Vec<Check> {
    if !xid.kmsg {
        return vec![Check::pass("kmsg", false, "disabled in config")];
    }
    let check = match KmsgReader::open(&xid.kmsg_path, StartAt::End) {
        Ok(_) => Check::pass(
            "kmsg",
            true,
            format!("{} readable", xid.kmsg_path.display()),
        ),
        Err(err) => {
            let detail = err.to_string();
            let cause = cause(&format!("{err:#}"));
            Check::failed_because("kmsg", true, detail, &cause)
        }
    };
    vec![check]
}

/// The cause of an error opening the kernel log.
pub fn cause(error: &str) -> Cause {
    if error.contains("No such file") || error.contains("os error 2") {
        Cause::KmsgMissing
    } else if error.contains("Permission denied") || error.contains("Operation not permitted") {
        Cause::KmsgDenied
    } else {
        Cause::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_errors_get_the_fix_of_their_cause() {
        assert_eq!(
            cause("opening /dev/kmsg: No such file or directory (os error 2)"),
            Cause::KmsgMissing
        );
        assert_eq!(
            cause("opening /dev/kmsg: Operation not permitted (os error 1)"),
            Cause::KmsgDenied
        );
        assert_eq!(cause("something else"), Cause::Unknown);
    }
}
