//! Who may do what on a thread.
//!
//! Three sources, unioned: the thread's creator holds every permission; the
//! token's `threads` claim grants by thread-id glob; the config grants by role
//! (`[[grants]]`). A thread the caller may not `view` must look exactly like
//! a missing one, so callers check `view` first and answer `not_found`.

use super::principal::{Permission, Principal};
use crate::config::RoleGrant;

/// The permissions a caller holds on one thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Permissions(u8);

impl Permissions {
    /// Every permission (the creator's).
    pub const ALL: Permissions = Permissions(0b11111);

    fn bit(p: Permission) -> u8 {
        match p {
            Permission::View => 1,
            Permission::Run => 2,
            Permission::Resume => 4,
            Permission::Cancel => 8,
            Permission::Meta => 16,
        }
    }

    /// Adds `p`.
    pub fn with(self, p: Permission) -> Permissions {
        Permissions(self.0 | Self::bit(p))
    }

    /// Whether `p` is held.
    pub fn has(self, p: Permission) -> bool {
        self.0 & Self::bit(p) != 0
    }
}

/// The permissions `who` holds on thread `thread_id`, created by `creator`
/// (`None`: the thread does not exist yet).
pub fn permissions(
    who: &Principal,
    thread_id: &str,
    creator: Option<&str>,
    grants: &[RoleGrant],
) -> Permissions {
    if creator == Some(who.subject.as_str()) {
        return Permissions::ALL;
    }
    let mut p = Permissions::default();
    for g in &who.grants {
        if glob_match(&g.pattern, thread_id) {
            for perm in &g.permissions {
                p = p.with(*perm);
            }
        }
    }
    for g in grants {
        if (g.role == "*" || who.roles.contains(&g.role)) && glob_match(&g.threads, thread_id) {
            for perm in g.permissions.iter().filter_map(|n| Permission::parse(n)) {
                p = p.with(perm);
            }
        }
    }
    p
}

/// Wildcard match: `*` matches any run (including empty), `?` one character.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ThreadGrant;

    fn who(roles: &[&str], grants: Vec<ThreadGrant>) -> Principal {
        Principal {
            subject: "u".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            tenant: "t".into(),
            grants,
            expires_at: 0,
            claims: Default::default(),
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("team-7-*", "team-7-abc"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*x*y", "axbxy"));
        assert!(!glob_match("team-7-*", "team-8-a"));
        assert!(!glob_match("a?c", "ac"));
    }

    #[test]
    fn sources_union_and_creator_has_all() {
        let grants = vec![RoleGrant {
            role: "support".into(),
            threads: "*".into(),
            permissions: vec!["view".into(), "meta".into()],
        }];
        let p = who(
            &["support"],
            vec![ThreadGrant {
                pattern: "x-*".into(),
                permissions: vec![Permission::Run],
            }],
        );
        let on_x = permissions(&p, "x-1", Some("other"), &grants);
        assert!(
            on_x.has(Permission::View) && on_x.has(Permission::Meta) && on_x.has(Permission::Run)
        );
        assert!(!on_x.has(Permission::Cancel));
        let on_y = permissions(&p, "y", Some("other"), &grants);
        assert!(!on_y.has(Permission::Run));
        let nobody = permissions(&who(&[], vec![]), "y", Some("other"), &grants);
        assert_eq!(nobody, Permissions::default());
        assert_eq!(
            permissions(&who(&[], vec![]), "y", Some("u"), &[]),
            Permissions::ALL
        );
    }
}
