//! The trust gate, pure: whether a pull request's code may run, decided from the event alone.
//!
//! Code runs when its author is trusted by association (OWNER, MEMBER, COLLABORATOR by default),
//! when its branch lives in the repository itself (whoever pushed it can already write there), or
//! when a maintainer applies the trust label — and then only for the head that label was applied
//! to: the `labeled` event for that label approves its head; new commits need the label again.

use serde::Deserialize;

/// The fields of a `pull_request` / `pull_request_target` event sandbench reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    #[serde(default)]
    pub action: String,
    pub pull_request: PullRequest,
    pub repository: Repository,
    /// The label just applied (`labeled` events).
    #[serde(default)]
    pub label: Option<Label>,
    #[serde(default)]
    pub sender: Option<User>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub author_association: String,
    pub user: User,
    pub head: GitRef,
    pub base: GitRef,
    #[serde(default)]
    pub labels: Vec<Label>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GitRef {
    pub sha: String,
    #[serde(rename = "ref", default)]
    pub name: String,
    /// `null` when the fork was deleted.
    #[serde(default)]
    pub repo: Option<Repository>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Repository {
    pub full_name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Label {
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub login: String,
}

/// Who is trusted.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Author associations trusted as they are (upper case, e.g. OWNER, MEMBER, COLLABORATOR).
    pub associations: Vec<String>,
    /// The label a maintainer applies to allow one head (None: no label allows anything).
    pub label: Option<String>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            associations: ["OWNER", "MEMBER", "COLLABORATOR"].map(String::from).to_vec(),
            label: Some("sandbench:trusted".into()),
        }
    }
}

/// The gate's answer, with the reason in words (it goes into the comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Trusted(String),
    Refused(String),
}

impl Decision {
    pub fn trusted(&self) -> bool {
        matches!(self, Decision::Trusted(_))
    }

    pub fn reason(&self) -> &str {
        match self {
            Decision::Trusted(r) | Decision::Refused(r) => r,
        }
    }
}

impl Event {
    /// The repository the head branch lives in, when it still exists.
    pub fn head_repository(&self) -> Option<&str> {
        self.pull_request.head.repo.as_ref().map(|r| r.full_name.as_str())
    }

    pub fn from_fork(&self) -> bool {
        self.head_repository() != Some(self.repository.full_name.as_str())
    }
}

/// Whether the event's head may run.
pub fn gate(event: &Event, policy: &Policy) -> Decision {
    let pr = &event.pull_request;
    let author = &pr.user.login;
    let association = pr.author_association.to_ascii_uppercase();
    if policy.associations.iter().any(|a| a.eq_ignore_ascii_case(&association)) {
        return Decision::Trusted(format!(
            "@{author} ({}) is trusted in {}",
            association.to_lowercase(),
            event.repository.full_name
        ));
    }
    if !event.from_fork() {
        return Decision::Trusted(format!("the head branch is in {} itself", event.repository.full_name));
    }
    let source = event.head_repository().map_or("a deleted fork".to_string(), |r| format!("the fork {r}"));
    let Some(label) = &policy.label else {
        return Decision::Refused(format!(
            "the code comes from {source} and @{author} ({}) is not trusted",
            association.to_lowercase()
        ));
    };
    let applied_now = event.action == "labeled" && event.label.as_ref().is_some_and(|l| &l.name == label);
    if applied_now {
        let by = event.sender.as_ref().map_or("a maintainer".to_string(), |s| format!("@{}", s.login));
        return Decision::Trusted(format!("{by} applied the {label} label to this head"));
    }
    let labelled = pr.labels.iter().any(|l| &l.name == label);
    if labelled {
        return Decision::Refused(format!(
            "the code comes from {source}; the {label} label allowed an earlier head, and new commits need a \
             maintainer to apply it again (remove it and add it)"
        ));
    }
    Decision::Refused(format!(
        "the code comes from {source} and @{author} ({}) is not trusted; a maintainer can allow this head by \
         applying the {label} label",
        association.to_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(action: &str, association: &str, head_repo: Option<&str>, labels: &[&str], label: Option<&str>) -> Event {
        let json = serde_json::json!({
            "action": action,
            "pull_request": {
                "number": 7,
                "state": "open",
                "author_association": association,
                "user": {"login": "alice"},
                "head": {"sha": "bbbb", "ref": "feature", "repo": head_repo.map(|r| serde_json::json!({"full_name": r}))},
                "base": {"sha": "aaaa", "ref": "main", "repo": {"full_name": "o/r"}},
                "labels": labels.iter().map(|l| serde_json::json!({"name": l})).collect::<Vec<_>>(),
            },
            "repository": {"full_name": "o/r"},
            "label": label.map(|l| serde_json::json!({"name": l})),
            "sender": {"login": "maint"},
        });
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn members_and_branches_of_the_repository_are_trusted() {
        let policy = Policy::default();
        for association in ["OWNER", "MEMBER", "COLLABORATOR", "member"] {
            let d = gate(&event("synchronize", association, Some("x/fork"), &[], None), &policy);
            assert!(d.trusted(), "{association}: {d:?}");
        }
        let d = gate(&event("opened", "CONTRIBUTOR", Some("o/r"), &[], None), &policy);
        assert_eq!(d, Decision::Trusted("the head branch is in o/r itself".into()));
    }

    #[test]
    fn fork_code_is_refused_and_the_reason_says_how_to_allow_it() {
        let d = gate(&event("opened", "CONTRIBUTOR", Some("mallory/r"), &[], None), &Policy::default());
        assert_eq!(
            d,
            Decision::Refused(
                "the code comes from the fork mallory/r and @alice (contributor) is not trusted; a maintainer can \
                 allow this head by applying the sandbench:trusted label"
                    .into()
            )
        );
        let d = gate(&event("opened", "NONE", None, &[], None), &Policy::default());
        assert!(!d.trusted() && d.reason().contains("a deleted fork"), "{d:?}");
    }

    #[test]
    fn the_label_allows_the_head_it_was_applied_to_only() {
        let policy = Policy::default();
        let applied =
            gate(&event("labeled", "NONE", Some("m/r"), &["sandbench:trusted"], Some("sandbench:trusted")), &policy);
        assert_eq!(applied, Decision::Trusted("@maint applied the sandbench:trusted label to this head".into()));
        // A later push keeps the label but not the approval.
        let pushed = gate(&event("synchronize", "NONE", Some("m/r"), &["sandbench:trusted"], None), &policy);
        assert!(!pushed.trusted() && pushed.reason().contains("allowed an earlier head"), "{pushed:?}");
        // Another label is no approval.
        let other = gate(&event("labeled", "NONE", Some("m/r"), &["bug"], Some("bug")), &policy);
        assert!(!other.trusted());
    }

    #[test]
    fn the_policy_is_configurable() {
        let policy = Policy { associations: vec!["CONTRIBUTOR".into()], label: None };
        assert!(gate(&event("opened", "CONTRIBUTOR", Some("m/r"), &[], None), &policy).trusted());
        let owner = gate(&event("opened", "OWNER", Some("m/r"), &[], None), &policy);
        assert!(!owner.trusted());
        let labelled =
            gate(&event("labeled", "NONE", Some("m/r"), &["sandbench:trusted"], Some("sandbench:trusted")), &policy);
        assert!(!labelled.trusted() && !labelled.reason().contains("label"), "{labelled:?}");
    }
}
