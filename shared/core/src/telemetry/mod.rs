//! What the functions tell operators: log lines ([`logs`]), metrics ([`emf`]), and the rule
//! for the X-Ray trace header that follows a notification from its request to the provider
//! call (the API takes it from the request: `notify_api::trace`).

pub mod emf;
pub mod logs;

/// The longest trace header kept; X-Ray's own are about 90 characters.
pub const MAX_TRACE_HEADER: usize = 256;

/// Whether `header` may be stored, logged and sent on as a trace header.
pub fn usable_trace_header(header: &str) -> bool {
    !header.is_empty()
        && header.len() <= MAX_TRACE_HEADER
        && header.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn unusable_headers_are_dropped() {
        assert!(usable_trace_header(HEADER));
        assert!(!usable_trace_header(""));
        assert!(!usable_trace_header(&"a".repeat(MAX_TRACE_HEADER + 1)));
        assert!(!usable_trace_header("Root=1-x\nInjected: yes"));
        assert!(!usable_trace_header("Root=1-é"));
    }
}
