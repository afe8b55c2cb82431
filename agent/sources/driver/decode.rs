//! Driver ring records to rows: the hook's name, the device's name and the decoded request.

use gpuship_sinks::schema::DriverRow;

use super::devices::DeviceNames;
use super::requests;
use crate::bpf::driver::types::{
    driver_event, gpuship_driver_hook, gpuship_record_kind as DriverRecordKind,
};
use crate::decode::{c_chars, read_record, DecodeError};
use crate::enrich::Clocks;

/// A driver record as a row: the hook's name, the device's name and the decoded request.
/// `slot_functions` names what each fentry slot times; `devices` names device numbers.
pub fn driver_row(
    raw: &[u8],
    clocks: &Clocks,
    slot_functions: &[Option<String>],
    devices: &mut DeviceNames,
) -> Result<DriverRow, DecodeError> {
    let event: driver_event = read_record(raw, "driver")?;
    let expected = DriverRecordKind::GPUSHIP_RECORD_DRIVER.0;
    if event.record_kind != expected {
        return Err(DecodeError::WrongKind {
            found: event.record_kind,
            expected,
            kind: "driver",
        });
    }
    let comm = c_chars(&event.comm).into_owned();
    let time_ns = clocks.boot_to_unix_ns(event.start_boot_ns);
    let (pid, tid) = (event.pid as i32, event.tid as i32);
    if event.hook == gpuship_driver_hook::GPUSHIP_DRIVER_HOOK_IOCTL.0 {
        let device = devices.name(event.major, event.minor).map(str::to_string);
        let request = requests::decode(event.request, device.as_deref());
        return Ok(DriverRow {
            time_ns,
            pid,
            tid,
            comm,
            hook: "ioctl".into(),
            device,
            major: Some(event.major),
            minor: Some(event.minor),
            fd: Some(event.fd as i32),
            request: Some(event.request),
            request_dir: request.dir,
            request_type: request.kind,
            request_nr: Some(request.nr),
            request_size: request.size,
            request_name: request.name,
            duration_ns: event.duration_ns,
            result: Some(event.ret),
            workload: None,
        });
    }
    let slot = event
        .hook
        .checked_sub(gpuship_driver_hook::GPUSHIP_DRIVER_HOOK_SLOT_BASE.0)
        .ok_or(DecodeError::UnknownHook(event.hook))?;
    let function = slot_functions
        .get(slot as usize)
        .cloned()
        .flatten()
        .ok_or(DecodeError::UnknownHook(event.hook))?;
    Ok(DriverRow {
        time_ns,
        pid,
        tid,
        comm,
        hook: function,
        device: None,
        major: None,
        minor: None,
        fd: None,
        request: None,
        request_dir: None,
        request_type: None,
        request_nr: None,
        request_size: None,
        request_name: None,
        duration_ns: event.duration_ns,
        result: None,
        workload: None,
    })
}
