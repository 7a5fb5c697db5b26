//! Events of `Engine::step` / `Engine::poll`.
use crate::error::Status;
use crate::session::Session;
use llmkv_sys as sys;

/// One event (`llmkv_event`), laid out exactly as the C struct so that a caller's fixed
/// `[Event; N]` is filled in place by the library, without copying or allocation.
///
/// An event refers to its session by address only: it holds the raw `llmkv_session*` the
/// library handed back, never dereferenced here (the session may be gone by the time the
/// event is looked at). That raw pointer makes `Event` neither `Send` nor `Sync`; send
/// [`Event::session_id`] and the decoded [`EventKind`] across threads instead.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Event(sys::llmkv_event);

/// A session's identity as events report it: compare with [`Session::id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub(crate) usize);

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A generated token (stop tokens are not reported).
    Token(i32),
    /// Generation ended.
    Done(FinishReason),
    /// A request of the session failed with this status (its message:
    /// [`Session::submit_error`] for submitted requests).
    Error(Status),
    /// A kind this binding does not know (a newer library).
    Unknown(u32),
}

/// `llmkv_finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    None,
    /// End-of-generation or stop token, or a stop string.
    Stop,
    /// max_new_tokens reached.
    Length,
    Cancelled,
    /// max_context reached.
    Context,
    /// The grammar, logit bias and bans leave no token to sample.
    Constraint,
    Unknown(u32),
}

impl FinishReason {
    pub fn from_raw(v: u32) -> FinishReason {
        match v {
            sys::LLMKV_FINISH_NONE => FinishReason::None,
            sys::LLMKV_FINISH_STOP => FinishReason::Stop,
            sys::LLMKV_FINISH_LENGTH => FinishReason::Length,
            sys::LLMKV_FINISH_CANCELLED => FinishReason::Cancelled,
            sys::LLMKV_FINISH_CONTEXT => FinishReason::Context,
            sys::LLMKV_FINISH_CONSTRAINT => FinishReason::Constraint,
            other => FinishReason::Unknown(other),
        }
    }
}

impl Event {
    /// An empty event, to fill a buffer: `[Event::EMPTY; 32]`.
    pub const EMPTY: Event = Event(sys::llmkv_event {
        session: std::ptr::null_mut(),
        user_data: std::ptr::null_mut(),
        kind: 0,
        token: 0,
        finish_reason: 0,
        status: 0,
    });

    /// A buffer of `N` empty events.
    pub const fn buffer<const N: usize>() -> [Event; N] {
        [Event::EMPTY; N]
    }

    pub fn kind(&self) -> EventKind {
        match self.0.kind {
            sys::LLMKV_EVENT_TOKEN => EventKind::Token(self.0.token),
            sys::LLMKV_EVENT_DONE => EventKind::Done(FinishReason::from_raw(self.0.finish_reason)),
            sys::LLMKV_EVENT_ERROR => {
                EventKind::Error(Status::from_code(self.0.status).unwrap_or(Status::Unknown(self.0.status)))
            }
            other => EventKind::Unknown(other),
        }
    }

    /// The session the event belongs to.
    pub fn session_id(&self) -> SessionId {
        SessionId(self.0.session as usize)
    }

    /// True when the event belongs to `s`.
    pub fn is_for(&self, s: &Session<'_>) -> bool {
        self.session_id() == s.id()
    }

    /// The session's [`crate::SessionParams::user_data`] tag.
    pub fn user_data(&self) -> usize {
        self.0.user_data as usize
    }

    /// The C struct.
    pub fn raw(&self) -> &sys::llmkv_event {
        &self.0
    }
}

impl Default for Event {
    fn default() -> Self {
        Event::EMPTY
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("session", &self.session_id())
            .field("user_data", &self.user_data())
            .field("kind", &self.kind())
            .finish()
    }
}

// The cast of `&mut [Event]` to `*mut llmkv_event` relies on this.
const _: () = assert!(std::mem::size_of::<Event>() == std::mem::size_of::<sys::llmkv_event>());
const _: () = assert!(std::mem::align_of::<Event>() == std::mem::align_of::<sys::llmkv_event>());
