//! control.sock as control speaks it: the protocol of [`iwarp_abi::app`], with control's own
//! types at its edge. A malformed message is [`Error::Protocol`], a refusal goes out as its
//! [`Error::code`] and message, a connection event as the protocol's [`Event`].

use crate::app_server::Reply;
use crate::conn_manager::AppEvent;
use crate::error::Error;
use iwarp_abi::app::{self, Event, Failure, Request, ToApp};

/// The most octets of an error's message sent to the application.
const MAX_FAILURE_TEXT: usize = 1024;

fn malformed(e: app::Malformed) -> Error {
    Error::Protocol { what: e.0 }
}

/// The length of the first whole message in `buf`, once `buf` holds it (including its
/// 4-octet length), or an error for a length out of range.
pub fn message_len(buf: &[u8]) -> Result<Option<usize>, Error> {
    app::message_len(buf).map_err(malformed)
}

/// Decodes one message body (without its length prefix).
pub fn decode_request(body: &[u8]) -> Result<Request, Error> {
    app::decode_request(body).map_err(malformed)
}

/// Encodes a reply. A failure travels as its [`Error::code`] and its message.
pub fn encode_reply(rep: &Reply) -> Vec<u8> {
    let wire = rep.clone().map_failed(|e| {
        let mut message = e.to_string();
        let mut n = message.len().min(MAX_FAILURE_TEXT);
        while !message.is_char_boundary(n) {
            n -= 1;
        }
        message.truncate(n);
        Failure {
            code: e.code() as u16,
            message,
        }
    });
    app::encode_to_app(&ToApp::Reply(wire))
}

/// Encodes an unsolicited connection or asynchronous event.
pub fn encode_event(e: &AppEvent) -> Vec<u8> {
    let event = match e.clone() {
        AppEvent::ConnectRequest(r) => Event::ConnectRequest(r),
        AppEvent::Established(x) => Event::Established(x),
        AppEvent::Rejected { conn, private_data } => Event::Rejected { conn, private_data },
        AppEvent::Failed { conn, reason } => Event::ConnectFailed {
            conn,
            reason: reason.to_string(),
        },
        AppEvent::Disconnected { conn, reason } => Event::Disconnected {
            conn,
            reason: format!("{reason:?}"),
        },
        AppEvent::QpTerminated(t) => Event::QpTerminated(t),
        AppEvent::QpError { qp } => Event::QpError { qp },
        AppEvent::CqOverflow { cq } => Event::CqOverflow { cq },
        AppEvent::SrqLimit { srq } => Event::SrqLimit { srq },
    };
    app::encode_to_app(&ToApp::Event(event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::Failure as SetupFailure;
    use iwarp_abi::app::{decode_to_app, ErrorCode};
    use iwarp_abi::command::CloseReason;
    use iwarp_config::Limits;

    fn sent(framed: &[u8]) -> ToApp {
        assert_eq!(message_len(framed).unwrap(), Some(framed.len()));
        decode_to_app(&framed[4..]).unwrap()
    }

    #[test]
    fn replies_and_refusals_reach_the_application_with_code_and_reason() {
        let l = Limits::default();
        assert_eq!(
            sent(&encode_reply(&Reply::Rnic(l.clone()))),
            ToApp::Reply(app::Reply::Rnic(l))
        );
        assert_eq!(
            sent(&encode_reply(&Reply::Id(42))),
            ToApp::Reply(app::Reply::Id(42))
        );
        let e = Error::InvalidStag { stag: 5 };
        assert_eq!(
            sent(&encode_reply(&Reply::Failed(e.clone()))),
            ToApp::Reply(app::Reply::Failed(Failure {
                code: ErrorCode::InvalidStag as u16,
                message: e.to_string()
            }))
        );
        let e = Error::Protocol {
            what: "trailing octets",
        };
        assert_eq!(
            decode_request(&[0x7f]),
            Err(malformed(app::Malformed(
                "value out of range (unknown variant, bad path or chunk)"
            )))
        );
        assert!(matches!(
            sent(&encode_reply(&Reply::Failed(e))),
            ToApp::Reply(app::Reply::Failed(Failure { code: 10, .. }))
        ));
    }

    #[test]
    fn events_keep_their_reason() {
        let e = AppEvent::Failed {
            conn: 3,
            reason: SetupFailure::TcpClosed,
        };
        assert_eq!(
            sent(&encode_event(&e)),
            ToApp::Event(Event::ConnectFailed {
                conn: 3,
                reason: SetupFailure::TcpClosed.to_string()
            })
        );
        let e = AppEvent::Disconnected {
            conn: 4,
            reason: CloseReason::Reset,
        };
        assert_eq!(
            sent(&encode_event(&e)),
            ToApp::Event(Event::Disconnected {
                conn: 4,
                reason: "Reset".into()
            })
        );
    }
}
