//! Permissions: who may do what under which key prefixes. Pure: the policy, its
//! checks, and the replicated state a `SetAccess` command changes (with its audit trail).
//!
//! A policy is TOML:
//!
//! ```toml
//! [groups]
//! agents = ["agent-a", "agent-b"]
//!
//! [[rule]]
//! who = ["group:agents"]         # principals, group:NAME, "*" (anyone authenticated), "anonymous"
//! prefixes = ["tasks/"]          # "" is every key
//! can = ["read", "claim"]        # read, claim, assign, admin (admin includes the others)
//!
//! [names]
//! agent-b = ["agent-b/worker-1"] # holder names a principal may use besides its own
//! ```
//!
//! - `read`: probe, board, record, history, check-token, watch;
//! - `claim`: claim, renew, release, update, and the handoff (offer, accept, decline, cancel);
//! - `assign`: assign;
//! - `admin`: revoke and quarantine there; with prefix `""`, the cluster calls too
//!   (membership, snapshot, backup, and changing this policy).
//!
//! A prefix request (board, watch, quarantine) needs the permission on a prefix that
//! contains the whole requested prefix. Until the first `SetAccess`, a node enforces its
//! `--access-policy` file if it was given one; with neither, every authenticated principal may
//! do everything, and an anonymous one everything but `admin` (the nodes warn so in their logs
//! when auth is on).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::limits::{AUDIT_ENTRIES_MAX, POLICY_BYTES_MAX, POLICY_ENTRIES_MAX, POLICY_RULES_MAX};
use super::validate;

const _: () = assert!(POLICY_BYTES_MAX < super::limits::REQUEST_BYTES_MAX);
/// The `who` entry every authenticated principal matches.
pub const ANYONE: &str = "*";
/// The `who` entry unauthenticated requests match (`--allow-anonymous`).
pub const ANONYMOUS: &str = "anonymous";
/// How a `who` entry names a group.
pub const GROUP_PREFIX: &str = "group:";

/// What a rule allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    Read,
    Claim,
    Assign,
    Admin,
}

impl Permission {
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Claim => "claim",
            Permission::Assign => "assign",
            Permission::Admin => "admin",
        }
    }
}

/// Who may do what where.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Group name → its principals.
    #[serde(default)]
    pub groups: BTreeMap<String, Vec<String>>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<Rule>,
    /// Principal → holder names it may use besides its own.
    #[serde(default)]
    pub names: BTreeMap<String, Vec<String>>,
}

/// One grant: these principals have these permissions under these prefixes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub who: Vec<String>,
    pub prefixes: Vec<String>,
    pub can: Vec<Permission>,
}

impl Policy {
    /// Parses and checks a policy's TOML text.
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        if text.len() > POLICY_BYTES_MAX {
            return Err(PolicyError::TooLong { bytes: text.len() });
        }
        let policy: Policy = toml::from_str(text).map_err(|e| PolicyError::Toml(e.to_string()))?;
        policy.check()?;
        Ok(policy)
    }

    /// The policy as TOML text.
    pub fn to_text(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot print the policy: {e}\n"))
    }

    /// Checks names, prefixes, group references and limits.
    pub fn check(&self) -> Result<(), PolicyError> {
        if self.rules.len() > POLICY_RULES_MAX {
            return Err(PolicyError::TooManyRules {
                rules: self.rules.len(),
            });
        }
        let entries = self.groups.values().map(Vec::len).sum::<usize>()
            + self.names.values().map(Vec::len).sum::<usize>()
            + self
                .rules
                .iter()
                .map(|r| r.who.len() + r.prefixes.len() + r.can.len())
                .sum::<usize>();
        if entries > POLICY_ENTRIES_MAX {
            return Err(PolicyError::TooManyEntries { entries });
        }
        let invalid =
            |place: String| move |problem: String| PolicyError::Invalid { place, problem };
        for (group, members) in &self.groups {
            let at = || invalid(format!("group {group:?}"));
            name(group).map_err(at())?;
            for m in members {
                principal(m).map_err(at())?;
            }
        }
        for (n, rule) in self.rules.iter().enumerate() {
            let at = || invalid(format!("rule {}", n + 1));
            if rule.who.is_empty() || rule.prefixes.is_empty() || rule.can.is_empty() {
                return Err(at()(
                    "who, prefixes and can must each name at least one".into(),
                ));
            }
            for who in &rule.who {
                match who.strip_prefix(GROUP_PREFIX) {
                    Some(group) if !self.groups.contains_key(group) => {
                        return Err(at()(format!("{who:?}: no such group in [groups]")));
                    }
                    Some(_) => {}
                    None if who == ANYONE || who == ANONYMOUS => {}
                    None => principal(who).map_err(at())?,
                }
            }
            for prefix in &rule.prefixes {
                validate::prefix(prefix).map_err(|e| at()(e.0))?;
            }
        }
        for (p, names) in &self.names {
            principal(p).map_err(invalid("names".into()))?;
            for holder in names {
                name(holder).map_err(invalid(format!("names of {p:?}")))?;
            }
        }
        Ok(())
    }

    /// Parses a policy to be set (`baton access set`, `--access-policy`): [`Policy::parse`],
    /// and [`Policy::leaves_an_admin`].
    pub fn parse_to_set(text: &str) -> Result<Policy, PolicyError> {
        let policy = Policy::parse(text)?;
        policy.leaves_an_admin()?;
        Ok(policy)
    }

    /// Refuses a policy that leaves no one `admin` on every key (prefix `""`): no one could
    /// change it again but a node (as etcd will not let root lose its role). Checked where a
    /// policy is set (`baton access set`, `--access-policy`), not when a set one is applied.
    pub fn leaves_an_admin(&self) -> Result<(), PolicyError> {
        // Anonymous clients are served only with --allow-anonymous: they are no one to count.
        let somebody = |who: &String| match who.strip_prefix(GROUP_PREFIX) {
            Some(group) => self.groups.get(group).is_some_and(|m| !m.is_empty()),
            None => who != ANONYMOUS,
        };
        let admin = self.rules.iter().any(|r| {
            r.can.contains(&Permission::Admin)
                && r.prefixes.iter().any(String::is_empty)
                && r.who.iter().any(somebody)
        });
        if admin {
            Ok(())
        } else {
            Err(PolicyError::NoAdmin)
        }
    }

    /// Whether `who` (an entry of a rule) covers `principal` (`None`: anonymous).
    fn covers(&self, who: &str, principal: Option<&str>) -> bool {
        match principal {
            None => who == ANONYMOUS,
            Some(p) => match who.strip_prefix(GROUP_PREFIX) {
                Some(group) => self
                    .groups
                    .get(group)
                    .is_some_and(|members| members.iter().any(|m| m == p)),
                None => who == ANYONE || (who == p && who != ANONYMOUS),
            },
        }
    }

    /// Whether `principal` has `permission` on everything under `target` (a key, or the
    /// prefix of a board, watch or quarantine): some rule covering it grants the permission,
    /// or `admin`, on a prefix of `target`.
    pub fn allows(&self, principal: Option<&str>, permission: Permission, target: &str) -> bool {
        self.rules.iter().any(|rule| {
            rule.can
                .iter()
                .any(|c| *c == permission || *c == Permission::Admin)
                && rule.prefixes.iter().any(|p| target.starts_with(p.as_str()))
                && rule.who.iter().any(|w| self.covers(w, principal))
        })
    }

    /// Whether `principal` may act under holder name `holder`: its own, or one `names` lists.
    pub fn may_use_name(&self, principal: &str, holder: &str) -> bool {
        holder == principal
            || self
                .names
                .get(principal)
                .is_some_and(|names| names.iter().any(|n| n == holder))
    }

    /// One line for the audit trail.
    pub fn summary(&self) -> String {
        format!(
            "{} rules, {} groups, {} name lists",
            self.rules.len(),
            self.groups.len(),
            self.names.len()
        )
    }
}

fn name(text: &str) -> Result<(), String> {
    validate::check_text("name", text, super::limits::HOLDER_NAME_BYTES_MAX).map_err(|e| e.0)
}

fn principal(text: &str) -> Result<(), String> {
    name(text)?;
    if text == ANYONE || text == ANONYMOUS || text.starts_with(GROUP_PREFIX) {
        return Err(format!(
            "{text:?} is reserved: {ANYONE:?} is anyone authenticated, {ANONYMOUS:?} the \
             unauthenticated, {GROUP_PREFIX}NAME a group"
        ));
    }
    Ok(())
}

/// One change of the policy, as the cluster remembers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The policy version this change made.
    pub version: u64,
    /// The revision of the command that made it.
    pub revision: u64,
    /// The proposing leader's wall clock, ms since the Unix epoch (informational).
    pub at_unix_ms: u64,
    /// Who made it: a principal, or a node.
    pub by: String,
    /// What it set: a summary, or that it cleared the policy.
    pub what: String,
}

/// The replicated permissions: the policy in force, its version, and the audit trail.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessState {
    /// `None`: no policy set, every authenticated principal may do everything.
    pub policy: Option<Policy>,
    /// Bumped by every change; 0 before the first.
    pub version: u64,
    /// The latest changes, oldest first, at most `AUDIT_ENTRIES_MAX`.
    pub audit: VecDeque<AuditEntry>,
}

impl AccessState {
    /// Applies a `SetAccess` command (already validated): replaces the policy (`None`
    /// clears it) and records the change. Returns the new version.
    pub fn set(&mut self, revision: u64, at_unix_ms: u64, by: &str, policy: Option<Policy>) -> u64 {
        self.version += 1;
        let what = policy
            .as_ref()
            .map_or_else(|| "cleared: no policy".to_owned(), Policy::summary);
        self.policy = policy;
        self.audit.push_back(AuditEntry {
            version: self.version,
            revision,
            at_unix_ms,
            by: by.to_owned(),
            what,
        });
        while self.audit.len() > AUDIT_ENTRIES_MAX {
            self.audit.pop_front();
        }
        self.version
    }

    /// The policy in force: the replicated one once any change was made (even a clear),
    /// before that `bootstrap` (a node's `--access-policy`), if given.
    pub fn in_force<'a>(&'a self, bootstrap: Option<&'a Policy>) -> Option<&'a Policy> {
        if self.version == 0 {
            bootstrap
        } else {
            self.policy.as_ref()
        }
    }
}

/// Why a principal may not do something: a refusal with its facts. `Display` is the line
/// for people (PERMISSION_DENIED's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No rule gives `principal` (`None`: anonymous) `permission` on `target`.
    NoPermission {
        principal: Option<String>,
        permission: Permission,
        target: String,
        /// The permissions version the refusal was decided under.
        version: u64,
    },
    /// With no policy set, anonymous clients may not administer the cluster.
    AnonymousAdmin { target: String },
    /// `principal` may not act as holder `holder`.
    NotYourName { principal: String, holder: String },
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denied::NoPermission {
                principal,
                permission,
                target,
                version,
            } => write!(
                f,
                "{} has no `{}` permission on {target:?} (permissions version {version}; an \
                 admin changes them with `baton access set`)",
                principal
                    .as_ref()
                    .map_or_else(|| "an anonymous client".to_owned(), |p| format!("{p:?}")),
                permission.name(),
            ),
            Denied::AnonymousAdmin { target } => write!(
                f,
                "an anonymous client has no `admin` permission on {target:?}: with no policy \
                 set, anonymous clients may do everything but administer the cluster"
            ),
            Denied::NotYourName { principal, holder } => write!(
                f,
                "you are {principal:?}: you cannot act as holder {holder:?} (a policy's \
                 [names] can allow it)"
            ),
        }
    }
}

impl std::error::Error for Denied {}

/// Why a policy text is not a policy: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("the policy is {bytes} bytes, at most {POLICY_BYTES_MAX} (POLICY_BYTES_MAX)")]
    TooLong { bytes: usize },
    /// Not TOML of a policy's shape (the TOML parser's words, with line and column).
    #[error("{0}")]
    Toml(String),
    #[error("{rules} rules, at most {POLICY_RULES_MAX} (POLICY_RULES_MAX)")]
    TooManyRules { rules: usize },
    #[error("{entries} entries, at most {POLICY_ENTRIES_MAX} (POLICY_ENTRIES_MAX)")]
    TooManyEntries { entries: usize },
    /// A name, principal, group reference or prefix that is not allowed: where (`rule 2`,
    /// `group "ops"`, `names`, `names of "ci"`) and what is wrong.
    #[error("{place}: {problem}")]
    Invalid { place: String, problem: String },
    #[error(
        "it leaves no one admin on every key (a rule with can = [\"admin\"] and prefixes = \
         [\"\"] for a principal, \"*\" or a group with members): no one could change it again"
    )]
    NoAdmin,
}

/// Refuses `principal` (`None`: anonymous) `permission` on `target` under `policy`; with no
/// policy, allows everything. `version` is quoted in the refusal.
pub fn check(
    policy: Option<&Policy>,
    version: u64,
    principal: Option<&str>,
    permission: Permission,
    target: &str,
) -> Result<(), Denied> {
    match policy {
        Some(policy) if !policy.allows(principal, permission, target) => {
            Err(Denied::NoPermission {
                principal: principal.map(str::to_owned),
                permission,
                target: target.to_owned(),
                version,
            })
        }
        // No policy: everything, but not the cluster's administration to the anonymous.
        None if principal.is_none() && permission == Permission::Admin => {
            Err(Denied::AnonymousAdmin {
                target: target.to_owned(),
            })
        }
        _ => Ok(()),
    }
}

/// Refuses `principal` acting as holder `holder` unless it is its own name or one `policy`
/// lets it use.
pub fn check_name(policy: Option<&Policy>, principal: &str, holder: &str) -> Result<(), Denied> {
    let allowed = match policy {
        Some(policy) => policy.may_use_name(principal, holder),
        None => holder == principal,
    };
    if allowed {
        Ok(())
    } else {
        Err(Denied::NotYourName {
            principal: principal.to_owned(),
            holder: holder.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
        [groups]
        agents = ["agent-a", "agent-b"]

        [[rule]]
        who = ["group:agents"]
        prefixes = ["tasks/"]
        can = ["read", "claim"]

        [[rule]]
        who = ["agent-a"]
        prefixes = ["billing/"]
        can = ["read"]

        [[rule]]
        who = ["ops"]
        prefixes = [""]
        can = ["admin"]

        [[rule]]
        who = ["*"]
        prefixes = ["public/"]
        can = ["read"]

        [[rule]]
        who = ["anonymous"]
        prefixes = ["open/"]
        can = ["read", "claim"]

        [names]
        agent-b = ["agent-b/worker-1"]
    "#;

    #[test]
    fn rules_grant_per_principal_group_and_prefix() {
        let p = Policy::parse(POLICY).unwrap();
        let (a, b, ops) = (Some("agent-a"), Some("agent-b"), Some("ops"));
        use Permission::*;
        assert!(p.allows(a, Claim, "tasks/1") && p.allows(b, Claim, "tasks/1"));
        assert!(p.allows(a, Read, "billing/x") && !p.allows(a, Claim, "billing/x"));
        assert!(!p.allows(b, Read, "billing/x"));
        assert!(!p.allows(a, Assign, "tasks/1") && !p.allows(a, Admin, "tasks/1"));
        // Admin includes everything, everywhere under its prefixes.
        for perm in [Read, Claim, Assign, Admin] {
            assert!(p.allows(ops, perm, "billing/x") && p.allows(ops, perm, ""));
        }
        // A prefix request needs the whole prefix covered.
        assert!(p.allows(a, Read, "tasks/") && p.allows(a, Read, "tasks/sub/"));
        assert!(!p.allows(a, Read, "") && !p.allows(a, Read, "task"));
        // "*" is anyone authenticated; "anonymous" only the unauthenticated.
        assert!(p.allows(Some("stranger"), Read, "public/x") && !p.allows(None, Read, "public/x"));
        assert!(p.allows(None, Claim, "open/x") && !p.allows(Some("stranger"), Claim, "open/x"));
        assert!(!p.allows(Some("stranger"), Read, "tasks/1"));
        // Names.
        assert!(
            p.may_use_name("agent-b", "agent-b/worker-1") && p.may_use_name("agent-b", "agent-b")
        );
        assert!(!p.may_use_name("agent-a", "agent-b/worker-1"));
        // Text round trip.
        assert_eq!(Policy::parse(&p.to_text()).unwrap(), p);
    }

    #[test]
    fn a_bad_policy_is_refused_with_what_is_wrong() {
        for (text, want) in [
            (
                "[[rule]]\nwho = [\"x\"]\nprefixes = [\"\"]\ncan = [\"fly\"]",
                "unknown variant",
            ),
            (
                "[[rule]]\nwho = [\"group:nope\"]\nprefixes = [\"\"]\ncan = [\"read\"]",
                "rule 1: \"group:nope\": no such group",
            ),
            (
                "[[rule]]\nwho = []\nprefixes = [\"\"]\ncan = [\"read\"]",
                "rule 1: who, prefixes and can",
            ),
            (
                "[[rule]]\nwho = [\"x\"]\nprefixes = [\"\"]\ncan = [\"read\"]\nextra = 1",
                "unknown field",
            ),
            ("[groups]\ng = [\"anonymous\"]", "is reserved"),
            ("[names]\n\"group:x\" = [\"y\"]", "is reserved"),
            ("nonsense", "expected"),
        ] {
            let err = Policy::parse(text).unwrap_err();
            assert!(err.to_string().contains(want), "{text:?}: {err}");
        }
        let big = "#".repeat(POLICY_BYTES_MAX + 1);
        let err = Policy::parse(&big).unwrap_err();
        assert!(err.to_string().contains("POLICY_BYTES_MAX"));
        assert_eq!(
            err,
            PolicyError::TooLong {
                bytes: POLICY_BYTES_MAX + 1
            }
        );
        // Parsed, but not to be set: no one would be admin.
        for text in [
            "[[rule]]\nwho = [\"x\"]\nprefixes = [\"\"]\ncan = [\"read\", \"claim\"]",
            "[[rule]]\nwho = [\"x\"]\nprefixes = [\"a/\"]\ncan = [\"admin\"]",
            "[groups]\nops = []\n[[rule]]\nwho = [\"group:ops\"]\nprefixes = [\"\"]\ncan = [\"admin\"]",
            "[[rule]]\nwho = [\"anonymous\"]\nprefixes = [\"\"]\ncan = [\"admin\"]",
        ] {
            let e = Policy::parse(text).unwrap().leaves_an_admin().unwrap_err();
            assert!(e.to_string().contains("leaves no one admin"), "{text:?}: {e}");
            assert_eq!(e, PolicyError::NoAdmin);
        }
        assert!(Policy::parse(POLICY).unwrap().leaves_an_admin().is_ok());
        let many = "[[rule]]\nwho = [\"x\"]\nprefixes = [\"\"]\ncan = [\"read\"]\n"
            .repeat(POLICY_RULES_MAX + 1);
        let err = Policy::parse(&many).unwrap_err();
        assert!(err.to_string().contains("POLICY_RULES_MAX"));
        assert_eq!(
            err,
            PolicyError::TooManyRules {
                rules: POLICY_RULES_MAX + 1
            }
        );
        // Where a bad entry is, as a fact of its own.
        assert_eq!(
            Policy::parse("[[rule]]\nwho = [\"group:ops\"]\nprefixes = [\"\"]\ncan = [\"read\"]"),
            Err(PolicyError::Invalid {
                place: "rule 1".into(),
                problem: "\"group:ops\": no such group in [groups]".into()
            })
        );
    }

    #[test]
    fn the_state_checks_against_the_policy_in_force_and_audits_every_change() {
        let mut s = AccessState::default();
        let bootstrap =
            Policy::parse("[[rule]]\nwho = [\"ops\"]\nprefixes = [\"\"]\ncan = [\"admin\"]\n")
                .unwrap();
        // Nothing set: no policy (everything allowed), or the node's bootstrap one.
        assert!(check(s.in_force(None), 0, Some("anyone"), Permission::Admin, "").is_ok());
        assert!(check(s.in_force(None), 0, None, Permission::Claim, "x").is_ok());
        assert!(check(s.in_force(None), 0, None, Permission::Admin, "x").is_err());
        assert!(check(
            s.in_force(Some(&bootstrap)),
            0,
            Some("anyone"),
            Permission::Read,
            "x"
        )
        .is_err());
        assert!(check_name(s.in_force(None), "agent-b", "agent-b/worker-1").is_err());
        assert_eq!(
            s.set(10, 1_000, "ops", Some(Policy::parse(POLICY).unwrap())),
            1
        );
        let e = check(
            s.in_force(Some(&bootstrap)),
            s.version,
            Some("agent-b"),
            Permission::Read,
            "billing/x",
        )
        .unwrap_err();
        // The refusal carries its facts; its line for people says them.
        assert_eq!(
            e,
            Denied::NoPermission {
                principal: Some("agent-b".into()),
                permission: Permission::Read,
                target: "billing/x".into(),
                version: 1
            }
        );
        let line = e.to_string();
        assert!(
            line.contains("\"agent-b\" has no `read` permission on \"billing/x\"")
                && line.contains("version 1"),
            "{e}"
        );
        let e = check(s.in_force(None), 1, None, Permission::Claim, "tasks/x").unwrap_err();
        assert!(e.to_string().contains("anonymous"), "{e}");
        assert!(check_name(s.in_force(None), "agent-b", "agent-b/worker-1").is_ok());
        // A clear is a change: the bootstrap policy no longer applies.
        assert_eq!(s.set(11, 2_000, "baton node 1", None), 2);
        assert!(check(
            s.in_force(Some(&bootstrap)),
            2,
            Some("agent-b"),
            Permission::Read,
            "billing/x"
        )
        .is_ok());
        let trail: Vec<_> = s
            .audit
            .iter()
            .map(|a| (a.version, a.revision, a.by.as_str()))
            .collect();
        assert_eq!(trail, [(1, 10, "ops"), (2, 11, "baton node 1")]);
        assert!(s.audit[1].what.contains("cleared"));
        for i in 0..AUDIT_ENTRIES_MAX as u64 {
            s.set(100 + i, 0, "ops", None);
        }
        assert_eq!(s.audit.len(), AUDIT_ENTRIES_MAX);
        assert_eq!(s.audit.front().unwrap().version, 3);
    }
}
