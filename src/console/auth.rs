//! Who is asking, and what they may do: console tokens (compared in constant time), an
//! authenticating proxy's identity header (believed only from `console.trusted_proxies`), and
//! the in-memory sessions a login opens, each with the CSRF token its write forms carry.
//!
//! Sessions live in this process and end at `console.session_ttl` or a restart; a console
//! behind a load balancer needs sticky sessions, or the identity header, or bearer tokens.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::HeaderMap;
use subtle::ConstantTimeEq;

use crate::config::{Cidr, ConsoleSettings, Secret};

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read every page.
    Viewer,
    /// Read, and replay or delete.
    Operator,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }
}

/// An authenticated user: how they are named in the audit log (never by their token) and
/// their role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub who: String,
    pub role: Role,
}

/// The console's access rules, built from `[console]`.
#[derive(PartialEq, Eq)]
pub struct Access {
    viewers: Vec<Secret>,
    operators: Vec<Secret>,
    identity_header: Option<http::HeaderName>,
    trusted_proxies: Vec<Cidr>,
    operator_names: Vec<String>,
    /// No tokens and no identity header: only possible on loopback (checked at load), where
    /// whoever reaches the console is its operator.
    open: bool,
}

impl Access {
    pub fn new(settings: &ConsoleSettings) -> Self {
        Self {
            viewers: settings.viewer_tokens.clone(),
            operators: settings.operator_tokens.clone(),
            identity_header: settings
                .identity_header
                .as_deref()
                .and_then(|h| http::HeaderName::from_bytes(h.as_bytes()).ok()),
            trusted_proxies: settings.trusted_proxies.clone(),
            operator_names: settings.operators.clone(),
            open: !settings.authenticates(),
        }
    }

    /// Whether the console asks nobody for credentials (loopback without tokens).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The principal a token stands for. Every configured token is compared, in constant time,
    /// so neither a match's position nor a near miss shows in the time taken.
    pub fn by_token(&self, token: &str) -> Option<Principal> {
        let mut found = None;
        for (role, tokens) in [
            (Role::Operator, &self.operators),
            (Role::Viewer, &self.viewers),
        ] {
            for (index, secret) in tokens.iter().enumerate() {
                let equal: bool = secret.expose().as_bytes().ct_eq(token.as_bytes()).into();
                if equal && found.is_none() {
                    found = Some(Principal {
                        who: format!("{}-token-{}", role.label(), index + 1),
                        role,
                    });
                }
            }
        }
        found
    }

    /// The principal an authenticating proxy names, if `peer` is one of the trusted proxies;
    /// or, on an open console, the loopback operator.
    pub fn by_peer(&self, peer: IpAddr, headers: &HeaderMap) -> Option<Principal> {
        if self.open {
            return Some(Principal {
                who: "loopback".to_owned(),
                role: Role::Operator,
            });
        }
        let header = self.identity_header.as_ref()?;
        if !self
            .trusted_proxies
            .iter()
            .any(|range| range.contains(peer))
        {
            return None;
        }
        let who = headers.get(header)?.to_str().ok()?.trim();
        if who.is_empty() {
            return None;
        }
        let role = if self.operator_names.iter().any(|o| o == who) {
            Role::Operator
        } else {
            Role::Viewer
        };
        Some(Principal {
            who: who.to_owned(),
            role,
        })
    }
}

/// One login's session.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    /// Carried by every write form of this session.
    pub csrf: String,
    expires: Instant,
}

/// The sessions of this process, by session ID (the cookie's value).
pub struct Sessions {
    ttl: Duration,
    by_id: Mutex<HashMap<String, Session>>,
}

/// Sessions kept at most: past this, expired ones are swept and then the login is refused,
/// so that a flood of logins cannot grow memory without bound.
const MAX_SESSIONS: usize = 10_000;

impl Sessions {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            by_id: Mutex::new(HashMap::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Opens a session for `principal`: its ID and CSRF token; `None` when full.
    pub fn open(&self, principal: Principal) -> Option<(String, Session)> {
        let id = random_token();
        let session = Session {
            principal,
            csrf: random_token(),
            expires: Instant::now() + self.ttl,
        };
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= MAX_SESSIONS {
            let now = Instant::now();
            sessions.retain(|_, s| s.expires > now);
            if sessions.len() >= MAX_SESSIONS {
                return None;
            }
        }
        sessions.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The live session `id`, if any.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        match sessions.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id` (logout).
    /// Ends every session: the tokens or rules they were opened under changed.
    pub fn close_all(&self) {
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        sessions.clear();
    }

    pub fn close(&self, id: &str) {
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(id);
    }
}

/// Whether `given` is the session's CSRF token, compared in constant time.
pub fn csrf_matches(session: &Session, given: &str) -> bool {
    session.csrf.as_bytes().ct_eq(given.as_bytes()).into()
}

/// 128 random bits, hex.
fn random_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ConsoleSettings {
        ConsoleSettings {
            viewer_tokens: vec![Secret::literal("view-1").unwrap()],
            operator_tokens: vec![Secret::literal("op-1").unwrap()],
            identity_header: Some("X-User".to_owned()),
            trusted_proxies: vec![
                Cidr::parse("10.0.0.1").unwrap(),
                Cidr::parse("10.0.1.0/24").unwrap(),
            ],
            operators: vec!["alice".to_owned()],
            ..ConsoleSettings::default()
        }
    }

    #[test]
    fn tokens_and_identities_map_to_roles() {
        let access = Access::new(&settings());
        assert_eq!(access.by_token("op-1").unwrap().role, Role::Operator);
        assert_eq!(access.by_token("view-1").unwrap().role, Role::Viewer);
        assert!(access.by_token("view-").is_none());
        assert!(access.by_token("").is_none());
        assert!(!access.by_token("op-1").unwrap().who.contains("op-1"));
        let mut headers = HeaderMap::new();
        headers.insert("x-user", "alice".parse().unwrap());
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(
            access.by_peer(proxy, &headers).unwrap().role,
            Role::Operator
        );
        assert!(access.by_peer(other, &headers).is_none());
        let in_range: IpAddr = "10.0.1.7".parse().unwrap();
        assert_eq!(
            access.by_peer(in_range, &headers).unwrap().role,
            Role::Operator
        );
        headers.insert("x-user", "bob".parse().unwrap());
        assert_eq!(access.by_peer(proxy, &headers).unwrap().role, Role::Viewer);
    }

    #[test]
    fn sessions_expire_and_csrf_is_per_session() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let who = Principal {
            who: "a".into(),
            role: Role::Viewer,
        };
        let (id, session) = sessions.open(who.clone()).unwrap();
        let (other, _) = sessions.open(who).unwrap();
        assert!(csrf_matches(&sessions.get(&id).unwrap(), &session.csrf));
        assert!(!csrf_matches(&sessions.get(&other).unwrap(), &session.csrf));
        sessions.close(&id);
        assert!(sessions.get(&id).is_none());
    }
}
