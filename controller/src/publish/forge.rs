//! The forge seam: the few calls publishing needs from a code host (GitHub today). The flow in
//! `publish/mod.rs` is written against this trait; `github.rs` implements it over HTTP.

/// A pull request as far as freshness goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullState {
    pub open: bool,
    /// Its current head commit.
    pub head: String,
}

/// A comment on a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: u64,
    /// The author's login (`github-actions[bot]` for the Actions token).
    pub author: String,
    pub body: String,
}

/// The state a commit status (or check) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Pending,
    Success,
    Failure,
    Error,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Success => "success",
            State::Failure => "failure",
            State::Error => "error",
        }
    }
}

/// A commit status: one line of summary beside the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitStatus {
    pub state: State,
    /// `sandbench/<spec>`: one status per spec.
    pub context: String,
    pub description: String,
    pub target_url: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The request may or may not have taken effect (a 5xx or a lost connection on a request
    /// that is not safe to repeat): look before trying again.
    #[error("{0}")]
    Unknown(String),
    #[error("{0}")]
    Failed(String),
}

/// What publishing needs from a forge. Reads return `None` when they were not sent (a dry run
/// without credentials): the flow then assumes an open pull request at the run's head and no
/// comments.
#[allow(async_fn_in_trait)] // used through generics only, never as `dyn`
pub trait Forge {
    async fn pull_request(&self, number: u64) -> Result<Option<PullState>, ForgeError>;
    /// Every comment of the pull request, oldest first.
    async fn comments(&self, number: u64) -> Result<Option<Vec<Comment>>, ForgeError>;
    async fn create_comment(&self, number: u64, body: &str) -> Result<(), ForgeError>;
    async fn update_comment(&self, id: u64, body: &str) -> Result<(), ForgeError>;
    async fn set_status(&self, commit: &str, status: &CommitStatus) -> Result<(), ForgeError>;
    /// When `label` was last applied to the pull request (its latest `labeled` event); `Some(None)`
    /// when it never was.
    async fn labeled_at(&self, number: u64, label: &str) -> Result<Option<Option<jiff::Timestamp>>, ForgeError>;
}
