use super::*;

#[test]
fn grpc_codes_are_sorted_and_labelled() {
    let unavailable = grpc_error(&tonic::Status::unavailable("connection refused"));
    assert!(unavailable.retryable);
    assert_eq!(unavailable.label, "grpc_unavailable");
    let invalid = grpc_error(&tonic::Status::invalid_argument("bad"));
    assert!(!invalid.retryable);
    assert_eq!(invalid.label, "grpc_invalid_argument");
    assert_eq!(
        grpc_error(&tonic::Status::deadline_exceeded("")).label,
        "grpc_deadline_exceeded"
    );
}

#[test]
fn exports_of_unknown_outcome_are_marked_maybe_delivered() {
    use tonic::Code;
    let maybe = [Code::Unknown, Code::Cancelled, Code::DeadlineExceeded];
    for code in [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ] {
        let error = grpc_error(&tonic::Status::new(code, "x"));
        assert_eq!(error.maybe_delivered, maybe.contains(&code), "{code:?}");
        assert!(!error.maybe_delivered || error.retryable, "{code:?}");
    }
    // The one seen duplicating: the collector died mid-request.
    let lost = grpc_error(&tonic::Status::unknown("transport error"));
    assert_eq!(
        (lost.label.as_str(), lost.maybe_delivered),
        ("grpc_unknown", true)
    );
    // Refused connection: never sent.
    assert!(!grpc_error(&tonic::Status::unavailable("tcp connect error")).maybe_delivered);

    let connect = http_send_error(true, false, "refused".into());
    assert_eq!(
        (connect.label.as_str(), connect.maybe_delivered),
        ("connect", false)
    );
    let timeout = http_send_error(false, true, "timed out".into());
    assert_eq!(
        (timeout.label.as_str(), timeout.maybe_delivered),
        ("timeout", true)
    );
    let reset = http_send_error(false, false, "connection reset".into());
    assert_eq!(
        (reset.label.as_str(), reset.maybe_delivered, reset.retryable),
        ("connection_lost", true, true)
    );
    for (status, maybe) in [
        (502, true),
        (504, true),
        (503, false),
        (429, false),
        (400, false),
    ] {
        let error = http_status_error(status, String::new());
        assert_eq!(error.maybe_delivered, maybe, "{status}");
        assert_eq!(error.label, format!("http_{status}"));
    }
}

#[test]
fn http_statuses_are_sorted() {
    for status in [429, 502, 503, 504, 401] {
        assert!(http_retryable(status), "{status}");
    }
    for status in [400, 404, 413, 500] {
        assert!(!http_retryable(status), "{status}");
    }
}
