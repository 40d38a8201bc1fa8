//! The one codec of every message between the stack's processes: command-ring slots
//! ([`crate::command`]) and control-socket messages ([`crate::app`]) are serde types written
//! with postcard (fields in order, integers as little-endian varints). Decoding bounds every
//! length by the input, checks every value, refuses trailing octets and never panics.

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::Serialize;
use std::marker::PhantomData;

/// Writes `v` at the start of `buf`; the octets used, or `None` when `buf` is too small.
pub(crate) fn encode_into<T: Serialize>(v: &T, buf: &mut [u8]) -> Option<usize> {
    postcard::to_slice(v, buf).ok().map(|s| s.len())
}

/// Appends `v` to `out`.
pub(crate) fn encode_append<T: Serialize>(v: &T, out: Vec<u8>) -> Vec<u8> {
    // Writing into a growing Vec fails only for types postcard cannot express (maps of
    // unknown length): none of the contract's.
    postcard::to_extend(v, out).expect("the contract's types all serialize")
}

/// The value `bytes` hold, exactly: a short, malformed or longer input is an error that says
/// what was wrong.
pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, &'static str> {
    let (v, rest) = postcard::take_from_bytes(bytes).map_err(reason)?;
    if !rest.is_empty() {
        return Err("trailing octets");
    }
    Ok(v)
}

fn reason(e: postcard::Error) -> &'static str {
    use postcard::Error as E;
    match e {
        E::DeserializeUnexpectedEnd => "message too short",
        E::DeserializeBadVarint => "malformed integer",
        E::DeserializeBadBool => "boolean not 0 or 1",
        E::DeserializeBadEnum => "unknown tag",
        E::DeserializeBadUtf8 | E::DeserializeBadChar => "text not UTF-8",
        E::DeserializeBadOption => "option tag not 0 or 1",
        E::SerdeDeCustom => "value out of range (unknown variant, bad path or chunk)",
        _ => "malformed message",
    }
}

/// Deserializes a value written as length-prefixed octets (a path, a chunk of a stream),
/// built by `make` from the borrowed octets, so nothing is allocated for a bad one.
pub(crate) fn from_octets<'de, D, T>(
    d: D,
    expecting: &'static str,
    make: fn(&[u8]) -> Option<T>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct Octets<T> {
        expecting: &'static str,
        make: fn(&[u8]) -> Option<T>,
        out: PhantomData<T>,
    }
    impl<T> Visitor<'_> for Octets<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<T, E> {
            (self.make)(v).ok_or_else(|| E::invalid_value(de::Unexpected::Bytes(v), &self))
        }
    }
    d.deserialize_bytes(Octets {
        expecting,
        make,
        out: PhantomData,
    })
}

/// `#[serde(with = "octets")]` for a `Vec<u8>` field: written as length-prefixed octets (the
/// same bytes postcard writes for a sequence of `u8`), read with its length checked against
/// the input before anything is allocated.
pub(crate) mod octets {
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        super::from_octets(d, "octets", |b| Some(b.to_vec()))
    }
}
