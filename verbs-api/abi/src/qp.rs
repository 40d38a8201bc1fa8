//! What the command ring and the application protocol both say about a queue pair: its state
//! and the cause of a Terminate.

use crate::id::QpId;
use core::fmt;
use serde::{Deserialize, Serialize};

/// QP states as the Verbs spec names them (section 6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpState {
    Idle,
    Rts,
    Closing,
    Terminate,
    Error,
}

impl QpState {
    /// The state's name as the spec spells it.
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Idle => "Idle",
            QpState::Rts => "RTS",
            QpState::Closing => "Closing",
            QpState::Terminate => "Terminate",
            QpState::Error => "Error",
        }
    }

    /// Whether `self -> to` is a transition of Verbs figure 4 ("Allowable QP Attribute
    /// Modifications") and sections 6.2.1 to 6.2.5. Idle and RTS may go to themselves (to
    /// change attributes); Terminate and Closing end on their own, so Modify QP there is an
    /// immediate error; Error leaves only for Idle.
    pub const fn transition_allowed(self, to: QpState) -> bool {
        use QpState::*;
        matches!(
            (self, to),
            (Idle, Idle)
                | (Idle, Rts)
                | (Idle, Error)
                | (Rts, Rts)
                | (Rts, Closing)
                | (Rts, Terminate)
                | (Rts, Error)
                | (Error, Idle)
        )
    }

    /// Whether a bare Modify QP may make `self -> to`: the transitions of
    /// [`QpState::transition_allowed`] but Idle -> RTS, which needs the LLP stream handle
    /// (section 6.2.1.2) and so happens only through connection setup.
    pub const fn modify_allowed(self, to: QpState) -> bool {
        self.transition_allowed(to) && !matches!((self, to), (QpState::Idle, QpState::Rts))
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Terminate sent (`received == false`) or received on `qp`, with its cause: the layer,
/// error type and code of RFC 5040 section 7. The QP is in Error with its work flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Terminated {
    pub qp: QpId,
    pub received: bool,
    pub layer: u8,
    pub etype: u8,
    pub code: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verbs section 6.2, figure 4: the transitions Modify QP may make; sections 6.2.3 to
    /// 6.2.5 refuse every Modify QP in Closing and Terminate, and all but Idle from Error.
    #[test]
    fn modify_qp_follows_the_state_diagram() {
        use QpState::*;
        assert!(Idle.modify_allowed(Error));
        assert!(Idle.transition_allowed(Rts));
        assert!(
            !Idle.modify_allowed(Rts),
            "RTS only through connection setup"
        );
        assert!(Rts.modify_allowed(Closing) && Rts.modify_allowed(Terminate));
        assert!(!Closing.modify_allowed(Rts));
        for s in [Idle, Rts, Closing, Terminate, Error] {
            assert!(!Closing.modify_allowed(s), "Closing -> {s}");
            assert!(!Terminate.modify_allowed(s), "Terminate -> {s}");
        }
        assert!(!Error.modify_allowed(Error));
        assert!(Error.modify_allowed(Idle) && !Error.modify_allowed(Rts));
        assert_eq!(Rts.to_string(), "RTS");
    }
}
