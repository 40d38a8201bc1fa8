//! The `port` file in an endpoint's runtime directory: what iwarpd's Ethernet port is (MAC,
//! IPv4 address and prefix, MTU) and the device's name, for libraries that describe the
//! device without opening it (the drop-in libibverbs lists devices and forms GID 0 from it).
//! Text, one `key=value` a line; unknown keys are ignored so later daemons may add some.

use std::net::Ipv4Addr;
use std::path::Path;

/// The file's name in the runtime directory.
pub const PORT_FILE: &str = "port";

/// One endpoint's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// The daemon's name (`daemon.name`), the device name applications see.
    pub name: String,
    pub mac: [u8; 6],
    pub ipv4: Ipv4Addr,
    pub prefix: u8,
    /// The IP MTU of the port.
    pub mtu: u32,
}

/// Why a `port` file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortFileError {
    /// A required key is absent.
    Missing(&'static str),
    /// A key's value does not parse.
    Invalid(&'static str),
}

impl core::fmt::Display for PortFileError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PortFileError::Missing(k) => write!(f, "port file: no {k}"),
            PortFileError::Invalid(k) => write!(f, "port file: bad {k}"),
        }
    }
}

impl std::error::Error for PortFileError {}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

impl PortInfo {
    /// The file's text.
    pub fn to_text(&self) -> String {
        let m = self.mac;
        format!(
            "name={}\nmac={:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}\nipv4={}/{}\nmtu={}\n",
            self.name, m[0], m[1], m[2], m[3], m[4], m[5], self.ipv4, self.prefix, self.mtu
        )
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<PortInfo, PortFileError> {
        let (mut name, mut mac, mut ip, mut mtu) = (None, None, None, None);
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim();
            match k.trim() {
                "name" => name = Some(v.to_string()),
                "mac" => mac = Some(parse_mac(v).ok_or(PortFileError::Invalid("mac"))?),
                "ipv4" => {
                    let (a, p) = v.split_once('/').ok_or(PortFileError::Invalid("ipv4"))?;
                    let a: Ipv4Addr = a.parse().map_err(|_| PortFileError::Invalid("ipv4"))?;
                    let p: u8 = p
                        .parse()
                        .ok()
                        .filter(|p| *p <= 32)
                        .ok_or(PortFileError::Invalid("ipv4"))?;
                    ip = Some((a, p));
                }
                "mtu" => mtu = Some(v.parse().map_err(|_| PortFileError::Invalid("mtu"))?),
                _ => {}
            }
        }
        let (ipv4, prefix) = ip.ok_or(PortFileError::Missing("ipv4"))?;
        Ok(PortInfo {
            name: name
                .filter(|n| !n.is_empty())
                .ok_or(PortFileError::Missing("name"))?,
            mac: mac.ok_or(PortFileError::Missing("mac"))?,
            ipv4,
            prefix,
            mtu: mtu.ok_or(PortFileError::Missing("mtu"))?,
        })
    }

    /// Reads `dir`'s port file.
    pub fn read(dir: &Path) -> std::io::Result<PortInfo> {
        let text = std::fs::read_to_string(dir.join(PORT_FILE))?;
        PortInfo::parse(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Writes `dir`'s port file whole (a reader never sees half of it).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{PORT_FILE}.tmp"));
        std::fs::write(&tmp, self.to_text())?;
        std::fs::rename(&tmp, dir.join(PORT_FILE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> PortInfo {
        PortInfo {
            name: "iwarp0".into(),
            mac: [0x02, 0, 0, 0, 0, 0x1f],
            ipv4: Ipv4Addr::new(10, 77, 0, 1),
            prefix: 24,
            mtu: 1500,
        }
    }

    #[test]
    fn round_trip() {
        assert_eq!(PortInfo::parse(&info().to_text()), Ok(info()));
        assert!(info().to_text().contains("mac=02:00:00:00:00:1f\n"));
    }

    #[test]
    fn unknown_keys_are_ignored_and_missing_ones_named() {
        let t = format!("speed=100G\n{}", info().to_text());
        assert_eq!(PortInfo::parse(&t), Ok(info()));
        let no_mtu = "name=a\nmac=02:00:00:00:00:01\nipv4=10.0.0.1/8\n";
        assert_eq!(PortInfo::parse(no_mtu), Err(PortFileError::Missing("mtu")));
    }

    #[test]
    fn bad_values_are_errors() {
        for (text, key) in [
            ("mac=02:00:00:00:00", "mac"),
            ("mac=02:00:00:00:00:01:02", "mac"),
            ("mac=0g:00:00:00:00:01", "mac"),
            ("ipv4=10.0.0.1", "ipv4"),
            ("ipv4=10.0.0.1/33", "ipv4"),
            ("mtu=-1", "mtu"),
        ] {
            assert_eq!(
                PortInfo::parse(text),
                Err(PortFileError::Invalid(key)),
                "{text}"
            );
        }
    }
}
