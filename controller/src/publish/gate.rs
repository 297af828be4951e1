//! The trust gate, pure: whether a pull request's code may run, decided from the event and,
//! for a label, from what the forge says now ([`Facts`]).
//!
//! Code runs when its author is trusted by association (OWNER, MEMBER, COLLABORATOR by default)
//! and the head branch lives in a repository the author (or the base repository's owner) owns;
//! when its branch lives in the repository itself (whoever pushed it can already write there); or
//! when a maintainer applies the trust label — and then only for the head that label was applied
//! to (see [`label_approves`]): new commits need the label again.
//!
//! The head repository's owner matters as much as the author: everyone its owner allows can
//! push to the head branch, so a member's pull request from a fork owned by someone else is
//! treated as that fork's code, not the member's (the owner's association is not in the event).
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
    /// When GitHub last recorded a push to the repository (any branch): an RFC 3339 time, or
    /// seconds since the epoch in some payloads.
    #[serde(default)]
    pub pushed_at: Option<serde_json::Value>,
}

impl Repository {
    /// The owner's login (the part of `full_name` before the slash).
    pub fn owner(&self) -> &str {
        self.full_name.split('/').next().unwrap_or_default()
    }

    /// [`Repository::pushed_at`] as a time; None when absent or unreadable.
    pub fn pushed_at(&self) -> Option<jiff::Timestamp> {
        match self.pushed_at.as_ref()? {
            serde_json::Value::String(text) => text.parse().ok(),
            serde_json::Value::Number(n) => jiff::Timestamp::from_second(n.as_i64()?).ok(),
            _ => None,
        }
    }
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
    /// How long after the last push to the head's repository the label must come to count.
    pub label_after_push: std::time::Duration,
}

/// The default of [`Policy::label_after_push`].
pub const LABEL_AFTER_PUSH: std::time::Duration = std::time::Duration::from_secs(60);

/// What the forge says now, read only when a label is to approve a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Facts {
    /// Not read: the event is not the trust label being applied.
    NotRead,
    /// The pull request's head now (API), and when the trust label was last applied (the issue's
    /// latest `labeled` event for it; None when it has none).
    Read { current_head: String, labeled_at: Option<jiff::Timestamp> },
    /// The reads failed, and why.
    Unreadable(String),
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            associations: ["OWNER", "MEMBER", "COLLABORATOR"].map(String::from).to_vec(),
            label: Some("sandbench:trusted".into()),
            label_after_push: LABEL_AFTER_PUSH,
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

/// Whether the event's head may run; `facts` matter only for a label being applied
/// ([`label_applied_now`]).
pub fn gate(event: &Event, policy: &Policy, facts: &Facts) -> Decision {
    let pr = &event.pull_request;
    let author = &pr.user.login;
    let association = pr.author_association.to_ascii_uppercase();
    let trusted_author = policy.associations.iter().any(|a| a.eq_ignore_ascii_case(&association));
    let who = format!("@{author} ({})", association.to_lowercase());
    if !event.from_fork() {
        if trusted_author {
            return Decision::Trusted(format!("{who} is trusted in {}", event.repository.full_name));
        }
        return Decision::Trusted(format!("the head branch is in {} itself", event.repository.full_name));
    }
    let source = event.head_repository().map_or("a deleted fork".to_string(), |r| format!("the fork {r}"));
    let why = match event.pull_request.head.repo.as_ref().map(Repository::owner) {
        Some(owner) if trusted_author && owned_by_trusted(owner, author, &event.repository) => {
            return Decision::Trusted(format!("{who} is trusted in {}", event.repository.full_name));
        }
        Some(owner) if trusted_author => format!(
            "the code comes from {source}, owned by @{owner}: {who} is trusted, but the fork's owner is not \
             known to be, and anyone the owner allows can push to it"
        ),
        None if trusted_author => {
            format!("the code comes from {source}: {who} is trusted, but who could push to it is not known")
        }
        _ => format!("the code comes from {source} and {who} is not trusted"),
    };
    let Some(label) = &policy.label else { return Decision::Refused(why) };
    if label_applied_now(event, policy) {
        return label_approves(event, policy, label, &source, facts);
    }
    if pr.labels.iter().any(|l| &l.name == label) {
        return Decision::Refused(format!(
            "{why}; the {label} label allowed an earlier head, and new commits need a maintainer to apply it \
             again (remove it and add it)"
        ));
    }
    Decision::Refused(format!("{why}; a maintainer can allow this head by applying the {label} label"))
}

/// Whether the head repository's owner is the author or the base repository's owner.
fn owned_by_trusted(owner: &str, author: &str, base: &Repository) -> bool {
    owner.eq_ignore_ascii_case(author) || owner.eq_ignore_ascii_case(base.owner())
}

/// Whether the event is the trust label being applied (the one case that needs [`Facts`]).
pub fn label_applied_now(event: &Event, policy: &Policy) -> bool {
    event.action == "labeled"
        && event.from_fork()
        && policy.label.as_ref().is_some_and(|label| event.label.as_ref().is_some_and(|l| &l.name == label))
}

/// Whether the trust label just applied approves the event's head. It does when both hold:
///
/// - **The event's head is the pull request's head now** (read from the API): the event carries
///   the head as it was when the label was applied; a push since then moved it, and the new head
///   is not approved (a later event runs it, and needs the label again).
/// - **The label came at least [`Policy::label_after_push`] after the last push to the head's
///   repository.** The label's time is the `created_at` of the pull request's latest `labeled`
///   event for it; the push's time is the head repository's `pushed_at` in the event. GitHub
///   sets both; the pusher cannot. Commit dates are never used: whoever pushes writes them, and
///   a backdated commit would look older than the label. `pushed_at` counts a push to any branch
///   of that repository, so it is never earlier than the head's own push: at worst a push
///   elsewhere makes the maintainer apply the label again. The margin is what stops a push a
///   few seconds before the click from being approved along with what the maintainer reviewed:
///   no server can know which head a maintainer looked at, so a head approved by a label has
///   stood, unchanged, for at least the margin before it (the pending-trust notice names it).
///
/// A deleted fork has no push time: its heads are never approved by a label.
pub fn label_approves(event: &Event, policy: &Policy, label: &str, source: &str, facts: &Facts) -> Decision {
    let head = &event.pull_request.head.sha;
    let again = "a maintainer must apply it again (remove it and add it)";
    let (current_head, labeled_at) = match facts {
        Facts::Read { current_head, labeled_at } => (current_head, labeled_at),
        Facts::Unreadable(why) => {
            return Decision::Refused(format!(
                "the code comes from {source}; the {label} label was applied, but whether it approves this \
                 head could not be checked: {why}"
            ));
        }
        Facts::NotRead => {
            return Decision::Refused(format!(
                "the code comes from {source}; the {label} label was applied, but the pull request was not read \
                 to check which head it approves"
            ));
        }
    };
    if current_head != head {
        return Decision::Refused(format!(
            "the code comes from {source}; the {label} label was applied to {}, but the pull request's head is now \
             {}: {again}",
            short(head),
            short(current_head)
        ));
    }
    let Some(labeled_at) = labeled_at else {
        return Decision::Refused(format!(
            "the code comes from {source}; the pull request's events name no {label} label being applied: {again}"
        ));
    };
    let Some(pushed_at) = event.pull_request.head.repo.as_ref().and_then(Repository::pushed_at) else {
        return Decision::Refused(format!(
            "the code comes from {source}, whose last push time is not known: the {label} label cannot tell \
             which head it approves"
        ));
    };
    let after = labeled_at.as_millisecond() - pushed_at.as_millisecond();
    let margin = policy.label_after_push.as_millis() as i64;
    if after < margin {
        return Decision::Refused(format!(
            "the code comes from {source}; the {label} label was applied at {labeled_at}, {} the last push to \
             the fork ({pushed_at}): a label counts only when applied at least {} after the head was pushed, so \
             that a push just before the click is not approved; {again}",
            relation(after),
            seconds(margin)
        ));
    }
    let by = event.sender.as_ref().map_or("a maintainer".to_string(), |s| format!("@{}", s.login));
    Decision::Trusted(format!(
        "{by} applied the {label} label to this head ({}), {} it was pushed",
        short(head),
        relation(after)
    ))
}

fn short(commit: &str) -> &str {
    crate::sanitize::prefix(commit, 12)
}

fn seconds(ms: i64) -> String {
    format!("{} s", ms / 1000)
}

/// `N s after` or `N s before`, from a difference in milliseconds.
fn relation(ms: i64) -> String {
    if ms < 0 { format!("{} before", seconds(-ms)) } else { format!("{} after", seconds(ms)) }
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

    /// A fixture in `events/`, as GitHub writes it, with `edit` applied.
    fn fixture(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Event {
        let text = match name {
            "labeled" => include_str!("events/labeled.json"),
            "member_outsider_fork" => include_str!("events/synchronize_member_outsider_fork.json"),
            _ => unreachable!("{name}"),
        };
        let mut json: serde_json::Value = serde_json::from_str(text).unwrap();
        edit(&mut json);
        serde_json::from_value(json).unwrap()
    }

    const HEAD: &str = "2222222222222222222222222222222222222222";
    const OLDER: &str = "3333333333333333333333333333333333333333";

    /// What the API says: the head now, and when the label was applied.
    fn read(current_head: &str, labeled_at: &str) -> Facts {
        Facts::Read { current_head: current_head.into(), labeled_at: Some(labeled_at.parse().unwrap()) }
    }

    fn gated(event: &Event, facts: &Facts) -> Decision {
        gate(event, &Policy::default(), facts)
    }

    #[test]
    fn members_and_branches_of_the_repository_are_trusted() {
        let policy = Policy::default();
        for association in ["OWNER", "MEMBER", "COLLABORATOR", "member"] {
            let d = gate(&event("synchronize", association, Some("alice/fork"), &[], None), &policy, &Facts::NotRead);
            assert!(d.trusted(), "{association}: {d:?}");
        }
        // A fork owned by the base repository's owner is as trusted as the author.
        let d = gate(&event("opened", "MEMBER", Some("o/r-copy"), &[], None), &policy, &Facts::NotRead);
        assert_eq!(d, Decision::Trusted("@alice (member) is trusted in o/r".into()));
        let d = gate(&event("opened", "CONTRIBUTOR", Some("o/r"), &[], None), &policy, &Facts::NotRead);
        assert_eq!(d, Decision::Trusted("the head branch is in o/r itself".into()));
    }

    #[test]
    fn a_member_s_pull_request_from_an_outsider_s_fork_is_that_fork_s_code() {
        let e = fixture("member_outsider_fork", |_| {});
        assert_eq!(e.pull_request.author_association, "MEMBER");
        let d = gated(&e, &Facts::NotRead);
        assert_eq!(
            d,
            Decision::Refused(
                "the code comes from the fork bob/r, owned by @bob: @alice (member) is trusted, but the fork's owner \
                 is not known to be, and anyone the owner allows can push to it; a maintainer can allow this head \
                 by applying the sandbench:trusted label"
                    .into()
            )
        );
        // The same pull request from the member's own fork runs.
        let own =
            fixture("member_outsider_fork", |j| j["pull_request"]["head"]["repo"]["full_name"] = "alice/r".into());
        assert!(gated(&own, &Facts::NotRead).trusted());
        // A deleted fork: nobody knows who could push to it.
        let gone = fixture("member_outsider_fork", |j| j["pull_request"]["head"]["repo"] = serde_json::Value::Null);
        let d = gated(&gone, &Facts::NotRead);
        assert!(!d.trusted() && d.reason().contains("a deleted fork: @alice (member) is trusted, but"), "{d:?}");
    }

    #[test]
    fn fork_code_is_refused_and_the_reason_says_how_to_allow_it() {
        let d =
            gate(&event("opened", "CONTRIBUTOR", Some("mallory/r"), &[], None), &Policy::default(), &Facts::NotRead);
        assert_eq!(
            d,
            Decision::Refused(
                "the code comes from the fork mallory/r and @alice (contributor) is not trusted; a maintainer can \
                 allow this head by applying the sandbench:trusted label"
                    .into()
            )
        );
        let d = gate(&event("opened", "NONE", None, &[], None), &Policy::default(), &Facts::NotRead);
        assert!(!d.trusted() && d.reason().contains("a deleted fork"), "{d:?}");
    }

    #[test]
    fn a_label_on_the_current_head_well_after_its_push_approves_it() {
        // Pushed at 11:30:00, labeled at 12:00:05.
        let e = fixture("labeled", |_| {});
        assert!(label_applied_now(&e, &Policy::default()));
        let d = gated(&e, &read(HEAD, "2026-03-02T12:00:05Z"));
        assert_eq!(
            d,
            Decision::Trusted(
                "@maint applied the sandbench:trusted label to this head (222222222222), 1805 s after it was pushed"
                    .into()
            )
        );
        // The margin is the policy's.
        let policy = Policy { label_after_push: std::time::Duration::from_secs(3600), ..Policy::default() };
        assert!(!gate(&e, &policy, &read(HEAD, "2026-03-02T12:00:05Z")).trusted());
    }

    #[test]
    fn a_label_on_an_older_head_is_refused() {
        // The label was applied to HEAD, but the pull request has moved on since.
        let e = fixture("labeled", |_| {});
        let d = gated(&e, &read(OLDER, "2026-03-02T12:00:05Z"));
        assert_eq!(
            d,
            Decision::Refused(
                "the code comes from the fork mallory/r; the sandbench:trusted label was applied to 222222222222, \
                 but the pull request's head is now 333333333333: a maintainer must apply it again (remove it and \
                 add it)"
                    .into()
            )
        );
        // The event names an older head than the one the API reports (a stale or replayed event).
        let stale = fixture("labeled", |j| j["pull_request"]["head"]["sha"] = OLDER.into());
        assert!(!gated(&stale, &read(HEAD, "2026-03-02T12:00:05Z")).trusted());
    }

    #[test]
    fn a_push_just_before_the_label_is_not_approved() {
        // Pushed at 11:59:58 (seconds before the click at 12:00:05): refused.
        let e = fixture("labeled", |j| j["pull_request"]["head"]["repo"]["pushed_at"] = "2026-03-02T11:59:58Z".into());
        let d = gated(&e, &read(HEAD, "2026-03-02T12:00:05Z"));
        assert!(!d.trusted(), "{d:?}");
        assert!(
            d.reason().contains(
                "applied at 2026-03-02T12:00:05Z, 7 s after the last push to the fork (2026-03-02T11:59:58Z): a \
                 label counts only when applied at least 60 s after the head was pushed"
            ),
            "{d:?}"
        );
        // A push after the label (its time in seconds since the epoch, as some payloads write it).
        let after = jiff::Timestamp::from_second(1_772_452_900).unwrap(); // 2026-03-02T12:01:40Z
        let e = fixture("labeled", |j| j["pull_request"]["head"]["repo"]["pushed_at"] = after.as_second().into());
        let d = gated(&e, &read(HEAD, "2026-03-02T12:00:05Z"));
        assert!(!d.trusted() && d.reason().contains("95 s before the last push"), "{d:?}");
        // Commit dates are not consulted: no push time, no approval.
        let e = fixture("labeled", |j| j["pull_request"]["head"]["repo"]["pushed_at"] = serde_json::Value::Null);
        let d = gated(&e, &read(HEAD, "2026-03-02T12:00:05Z"));
        assert!(!d.trusted() && d.reason().contains("whose last push time is not known"), "{d:?}");
    }

    #[test]
    fn a_label_whose_facts_are_unknown_is_refused_saying_why() {
        let e = fixture("labeled", |_| {});
        let d = gated(&e, &Facts::Unreadable("GET /repos/o/r/pulls/7: 404".into()));
        assert!(!d.trusted() && d.reason().ends_with("could not be checked: GET /repos/o/r/pulls/7: 404"), "{d:?}");
        assert!(!gated(&e, &Facts::NotRead).trusted());
        let none = Facts::Read { current_head: HEAD.into(), labeled_at: None };
        let d = gated(&e, &none);
        assert!(!d.trusted() && d.reason().contains("name no sandbench:trusted label being applied"), "{d:?}");
    }

    #[test]
    fn the_label_allows_the_head_it_was_applied_to_only() {
        let policy = Policy::default();
        // A later push keeps the label but not the approval.
        let pushed =
            gate(&event("synchronize", "NONE", Some("m/r"), &["sandbench:trusted"], None), &policy, &Facts::NotRead);
        assert!(!pushed.trusted() && pushed.reason().contains("allowed an earlier head"), "{pushed:?}");
        // Another label is no approval, and needs no reads.
        let other = event("labeled", "NONE", Some("m/r"), &["bug"], Some("bug"));
        assert!(!label_applied_now(&other, &policy));
        assert!(!gate(&other, &policy, &Facts::NotRead).trusted());
    }

    #[test]
    fn the_policy_is_configurable() {
        let policy = Policy { associations: vec!["CONTRIBUTOR".into()], label: None, ..Policy::default() };
        assert!(gate(&event("opened", "CONTRIBUTOR", Some("alice/r"), &[], None), &policy, &Facts::NotRead).trusted());
        let owner = gate(&event("opened", "OWNER", Some("alice/r"), &[], None), &policy, &Facts::NotRead);
        assert!(!owner.trusted());
        let e = fixture("labeled", |j| j["pull_request"]["author_association"] = "NONE".into());
        assert!(!label_applied_now(&e, &policy));
        let labelled = gate(&e, &policy, &read(HEAD, "2026-03-02T12:00:05Z"));
        assert!(!labelled.trusted() && !labelled.reason().contains("label"), "{labelled:?}");
    }
}
