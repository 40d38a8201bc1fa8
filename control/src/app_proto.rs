//! control.sock as control speaks it: the protocol of [`iwarp_abi::app`], with control's own
//! types at its edge. A malformed message is [`Error::Protocol`], a refusal goes out as its
//! [`Error::code`] and message.

use crate::app_server::Reply;
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
pub fn encode_event(e: &Event) -> Vec<u8> {
    app::encode_to_app(&ToApp::Event(e.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_abi::app::{decode_to_app, ErrorCode};
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
}
