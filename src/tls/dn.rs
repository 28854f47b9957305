//! A certificate's subject as the `x509:` ACL id: the distinguished name in RFC 2253 form,
//! the string Java's `X500Principal.getName()` gives and ZooKeeper's
//! X509AuthenticationProvider uses ("CN=client,O=Example,C=US": the last RDN of the encoding
//! first, `+` between the attributes of one RDN).
//! Rules: keywords are RFC 2253's own (CN, C, L, ST, O, OU, STREET, DC, UID); any other
//! attribute is its dotted OID with the value as `#` + the hex of its DER; string values are
//! escaped as RFC 2253 says. Pure: bytes in, string out; a certificate that does not parse is
//! an error, never a panic.

use x509_parser::der_parser::asn1_rs::Any;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::X509Name;

/// RFC 2253's attribute keywords by OID.
const KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// Why a certificate gave no subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnError {
    /// The DER does not parse as an X.509 certificate.
    NotACertificate,
}

/// The subject DN of a DER certificate, RFC 2253 style.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, DnError> {
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|_| DnError::NotACertificate)?;
    Ok(rfc2253(cert.subject()))
}

fn rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| attribute(&atv.attr_type().to_id_string(), atv.attr_value()))
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    // RFC 2253 writes the RDN sequence back to front.
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn attribute(oid: &str, value: &Any<'_>) -> String {
    match KEYWORDS.iter().find(|(o, _)| *o == oid) {
        Some((_, keyword)) => match string_value(value) {
            Some(s) => format!("{keyword}={}", escape(&s)),
            None => format!("{keyword}=#{}", hex_der(value)),
        },
        None => format!("{oid}=#{}", hex_der(value)),
    }
}

/// The value of a directory string (UTF8String, PrintableString, IA5String, T61String,
/// BMPString, UniversalString), if it is one.
fn string_value(value: &Any<'_>) -> Option<String> {
    let data = value.data;
    match value.header.tag().0 {
        // UTF8String, PrintableString, T61String (read as Latin-1 where not UTF-8), IA5String
        12 | 19 | 22 => std::str::from_utf8(data).ok().map(str::to_string),
        20 => Some(
            std::str::from_utf8(data).map(str::to_string).unwrap_or_else(|_| data.iter().map(|&b| b as char).collect()),
        ),
        // BMPString: UTF-16BE
        30 if data.len().is_multiple_of(2) => {
            let units: Vec<u16> = data.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        // UniversalString: UTF-32BE
        28 if data.len().is_multiple_of(4) => {
            data.chunks_exact(4).map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
        _ => None,
    }
}

/// RFC 2253 §2.4: `,` `+` `"` `\` `<` `>` `;` escaped with a backslash, and a leading `#` or
/// space and a trailing space.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `#` form: the hex of the whole DER encoding (tag, length, value).
fn hex_der(value: &Any<'_>) -> String {
    let data = value.data;
    let class = (value.header.class() as u8) << 6;
    let constructed = if value.header.is_constructed() { 0x20 } else { 0 };
    let mut der = vec![class | constructed | (value.header.tag().0 as u8 & 0x1f)];
    let len = data.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().iter().copied().skip_while(|&b| b == 0).collect();
        der.push(0x80 | bytes.len() as u8);
        der.extend_from_slice(&bytes);
    }
    der.extend_from_slice(data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_rfc_2253_says() {
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape("#lead"), "\\#lead");
        assert_eq!(escape(" both "), "\\ both\\ ");
        assert_eq!(escape("q\"<>;\\"), "q\\\"\\<\\>\\;\\\\");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert_eq!(subject_dn(b"\x30\x03\x02\x01"), Err(DnError::NotACertificate));
        assert_eq!(subject_dn(&[]), Err(DnError::NotACertificate));
    }
}
