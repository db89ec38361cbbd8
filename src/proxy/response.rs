//! The stored response: what a completed key answers again, byte for byte.
//!
//! Stored are the status, the end-to-end headers (hop-by-hop headers and `Date` are the
//! connection's and the moment's, not the resource's; `Set-Cookie` is the first client's session,
//! not the resource's, unless a proxy says `store_set_cookie = true`) and the body. A response
//! whose body is over `max_stored_body` is stored with status and headers only, marked
//! *truncated*; its replay answers them with an empty body and `Idempotency-Replay-Truncated:
//! true`. A response whose body broke after a storable head is stored with status and headers
//! only, marked *incomplete*: the request was executed, but there is no answer to replay, so the
//! proxy answers it and every retry with a 502 problem instead (`proxy::execute`).
//!
//! Encoding (inside the done record, see `store::record`): `r1.` then unpadded standard base64
//! of: status (u16), flags (u8: 1 = truncated, 2 = incomplete; records written before the
//! incomplete flag existed never set it), header count (u16), per header its name (u16 length +
//! bytes) and value (u32 length + bytes), then the body to the end. Base64 keeps the record
//! ASCII without spaces, as the record format requires.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use base64::Engine;
use bytes::Bytes;

use super::upstream::HopByHop;

/// Marks every replay.
pub use crate::util::REPLAYED;
/// Marks a replay whose body was too large to store.
pub const TRUNCATED: HeaderName = HeaderName::from_static("idempotency-replay-truncated");

const PREFIX: &str = "r1.";
const FLAG_TRUNCATED: u8 = 1;
const FLAG_INCOMPLETE: u8 = 2;

/// One upstream response as stored for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    pub truncated: bool,
    /// The upstream began this answer and its body broke: executed, nothing to replay.
    pub incomplete: bool,
}

impl StoredResponse {
    /// The storable part of an upstream response: end-to-end headers other than `Date`.
    pub fn new(status: StatusCode, headers: &HeaderMap, body: Bytes, truncated: bool) -> Self {
        let hop = HopByHop::of(headers);
        let headers = headers
            .iter()
            .filter(|(name, _)| *name != header::DATE && !hop.contains(name))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Self {
            status,
            headers,
            body: if truncated { Bytes::new() } else { body },
            truncated,
            incomplete: false,
        }
    }

    /// The record of an answer whose body broke after its storable head: status and headers
    /// only, marked incomplete.
    pub fn incomplete(status: StatusCode, headers: &HeaderMap) -> Self {
        Self {
            incomplete: true,
            ..Self::new(status, headers, Bytes::new(), false)
        }
    }

    /// Drops `Set-Cookie`: a session cookie set for the first client must not be replayed to
    /// whoever retries with the same key (two anonymous callers share a scope).
    pub fn without_set_cookie(mut self) -> Self {
        self.headers.retain(|(name, _)| *name != header::SET_COOKIE);
        self
    }

    /// The same answer with status and headers only, marked truncated: what is stored when the
    /// whole answer does not fit the store's byte budget.
    pub fn truncate(self) -> Self {
        Self {
            body: Bytes::new(),
            truncated: true,
            ..self
        }
    }

    /// The text stored as the done record's acknowledgement.
    pub fn encode(&self) -> String {
        self.encode_with_room(0)
    }

    /// [`encode`](Self::encode), in a string with `room` bytes to spare past it: the rest of
    /// the done record (`store::record::done_from`), which then needs no copy.
    pub fn encode_with_room(&self, room: usize) -> String {
        let mut out = Vec::with_capacity(8 + self.body.len() + 64 * self.headers.len());
        out.extend(self.status.as_u16().to_be_bytes());
        let mut flags = 0;
        if self.truncated {
            flags |= FLAG_TRUNCATED;
        }
        if self.incomplete {
            flags |= FLAG_INCOMPLETE;
        }
        out.push(flags);
        out.extend((self.headers.len() as u16).to_be_bytes());
        for (name, value) in &self.headers {
            out.extend((name.as_str().len() as u16).to_be_bytes());
            out.extend(name.as_str().as_bytes());
            out.extend((value.len() as u32).to_be_bytes());
            out.extend(value.as_bytes());
        }
        out.extend(&self.body);
        // One allocation of the final size, not a string grown as the encoding goes.
        let encoded = base64::encoded_len(out.len(), false).unwrap_or(0);
        let mut text = String::with_capacity(PREFIX.len() + encoded + room);
        text.push_str(PREFIX);
        base64::engine::general_purpose::STANDARD_NO_PAD.encode_string(out, &mut text);
        text
    }

    /// Reads what [`encode`](Self::encode) wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(text.strip_prefix(PREFIX)?)
            .ok()?;
        let mut reader = Reader(&bytes);
        let status = StatusCode::from_u16(reader.u16()?).ok()?;
        let flags = reader.take(1)?[0];
        let count = reader.u16()?;
        let mut headers = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let name_len = reader.u16()? as usize;
            let name = HeaderName::from_bytes(reader.take(name_len)?).ok()?;
            let value_len = reader.u32()? as usize;
            let value = HeaderValue::from_bytes(reader.take(value_len)?).ok()?;
            headers.push((name, value));
        }
        Some(Self {
            status,
            headers,
            body: Bytes::copy_from_slice(reader.0),
            truncated: flags & FLAG_TRUNCATED != 0,
            incomplete: flags & FLAG_INCOMPLETE != 0,
        })
    }

    /// The replay: stored status, headers and body, plus `Idempotency-Replayed: true`.
    pub fn replay(&self) -> Response<Body> {
        let mut response = Response::new(Body::from(self.body.clone()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
        if self.truncated {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            headers.insert(TRUNCATED, HeaderValue::from_static("true"));
        }
        response
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::DATE,
            HeaderValue::from_static("Tue, 01 Jul 2025 10:00:00 GMT"),
        );
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-conn"),
        );
        headers.insert("x-conn", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        headers.insert("location", HeaderValue::from_static("/v1/orders/42"));
        headers
    }

    #[test]
    fn round_trips_byte_for_byte_without_hop_by_hop_or_date() {
        let body = Bytes::from_static(b"{\"id\":42}\x00\xff binary too");
        let stored = StoredResponse::new(StatusCode::CREATED, &upstream_headers(), body, false);
        let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["content-type", "set-cookie", "set-cookie", "location"]
        );
        let text = stored.encode();
        assert!(text.is_ascii() && !text.contains(' '));
        // With room to spare for the rest of a done record, the same text, and the room.
        let roomy = stored.encode_with_room(11);
        assert_eq!(roomy, text);
        assert!(roomy.capacity() >= text.len() + 11);
        assert_eq!(StoredResponse::decode(&text), Some(stored.clone()));
        let replay = stored.replay();
        assert_eq!(replay.status(), StatusCode::CREATED);
        assert_eq!(replay.headers()[REPLAYED], "true");
        assert_eq!(replay.headers().get_all("set-cookie").iter().count(), 2);
        assert!(replay.headers().get(TRUNCATED).is_none());
    }

    #[test]
    fn a_truncated_response_keeps_status_and_headers_only() {
        let stored = StoredResponse::new(
            StatusCode::OK,
            &upstream_headers(),
            Bytes::from_static(b"big"),
            true,
        );
        assert!(stored.body.is_empty());
        let decoded = StoredResponse::decode(&stored.encode()).unwrap();
        assert!(decoded.truncated);
        let replay = decoded.replay();
        assert_eq!(replay.headers()[header::CONTENT_LENGTH], "0");
        assert_eq!(replay.headers()[TRUNCATED], "true");
    }

    #[test]
    fn an_incomplete_answer_keeps_status_and_headers_and_its_flag() {
        let stored = StoredResponse::incomplete(StatusCode::OK, &upstream_headers());
        assert!(stored.incomplete && !stored.truncated && stored.body.is_empty());
        let decoded = StoredResponse::decode(&stored.encode()).unwrap();
        assert_eq!(decoded, stored);
        // A record written before the flag existed (flags byte 1 = truncated only) still reads.
        let old = StoredResponse::new(StatusCode::OK, &HeaderMap::new(), Bytes::new(), true);
        let decoded = StoredResponse::decode(&old.encode()).unwrap();
        assert!(decoded.truncated && !decoded.incomplete);
    }

    #[test]
    fn set_cookie_is_dropped_unless_kept() {
        let stored = StoredResponse::new(StatusCode::OK, &upstream_headers(), Bytes::new(), false);
        assert_eq!(
            stored
                .headers
                .iter()
                .filter(|(n, _)| n == "set-cookie")
                .count(),
            2
        );
        let dropped = stored.without_set_cookie();
        assert!(dropped.headers.iter().all(|(n, _)| n != "set-cookie"));
        assert!(dropped.replay().headers().get("set-cookie").is_none());
        assert!(dropped.headers.iter().any(|(n, _)| n == "location"));
    }

    #[test]
    fn garbage_is_not_a_response() {
        assert_eq!(StoredResponse::decode("1-0"), None);
        assert_eq!(StoredResponse::decode("r1.!!"), None);
        assert_eq!(StoredResponse::decode("r1.AAA"), None);
    }
}
