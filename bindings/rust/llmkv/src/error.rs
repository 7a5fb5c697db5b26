//! Status codes and errors.
use llmkv_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// A failing `llmkv_status` (the header's codes; values fixed forever). `LLMKV_OK` is not a
/// `Status`: success is `Ok(..)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    InvalidArgument,
    OutOfMemory,
    /// The request can never fit, even with offload.
    KvCapacity,
    Io,
    ModelFormat,
    Unsupported,
    /// Device lost: only dropping the engine remains valid.
    Backend,
    /// Call not valid in the object's current state.
    State,
    SnapshotFormat,
    Cancelled,
    Internal,
    /// A code this binding does not know (a newer library).
    Unknown(i32),
}

impl Status {
    /// The status of a C return code; `None` for `LLMKV_OK`.
    pub fn from_code(code: i32) -> Option<Status> {
        Some(match code {
            sys::LLMKV_OK => return None,
            sys::LLMKV_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::LLMKV_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::LLMKV_ERR_KV_CAPACITY => Status::KvCapacity,
            sys::LLMKV_ERR_IO => Status::Io,
            sys::LLMKV_ERR_MODEL_FORMAT => Status::ModelFormat,
            sys::LLMKV_ERR_UNSUPPORTED => Status::Unsupported,
            sys::LLMKV_ERR_BACKEND => Status::Backend,
            sys::LLMKV_ERR_STATE => Status::State,
            sys::LLMKV_ERR_SNAPSHOT_FORMAT => Status::SnapshotFormat,
            sys::LLMKV_ERR_CANCELLED => Status::Cancelled,
            sys::LLMKV_ERR_INTERNAL => Status::Internal,
            other => Status::Unknown(other),
        })
    }

    /// The C code (`LLMKV_ERR_*`).
    pub fn code(self) -> i32 {
        match self {
            Status::InvalidArgument => sys::LLMKV_ERR_INVALID_ARGUMENT,
            Status::OutOfMemory => sys::LLMKV_ERR_OUT_OF_MEMORY,
            Status::KvCapacity => sys::LLMKV_ERR_KV_CAPACITY,
            Status::Io => sys::LLMKV_ERR_IO,
            Status::ModelFormat => sys::LLMKV_ERR_MODEL_FORMAT,
            Status::Unsupported => sys::LLMKV_ERR_UNSUPPORTED,
            Status::Backend => sys::LLMKV_ERR_BACKEND,
            Status::State => sys::LLMKV_ERR_STATE,
            Status::SnapshotFormat => sys::LLMKV_ERR_SNAPSHOT_FORMAT,
            Status::Cancelled => sys::LLMKV_ERR_CANCELLED,
            Status::Internal => sys::LLMKV_ERR_INTERNAL,
            Status::Unknown(c) => c,
        }
    }

    /// The library's name of the code (`llmkv_status_string`: "LLMKV_ERR_STATE";
    /// "LLMKV_ERR_UNKNOWN" for codes it does not know).
    pub fn name(self) -> &'static str {
        // SAFETY: llmkv_status_string accepts any value and returns static storage.
        let p = unsafe { sys::llmkv_status_string(self.code()) };
        if p.is_null() {
            return "LLMKV_ERR_UNKNOWN";
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("LLMKV_ERR_UNKNOWN")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: the status code and the library's detail message (`llmkv_last_error`,
/// read on the same thread right after the call), or this binding's message for arguments
/// it rejects before calling the library (a path with a NUL byte, a prefix of another
/// engine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    /// An error made by the binding itself.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The error of a failing C return code, with the thread's `llmkv_last_error`. Must be
    /// called right after the failing call, on the same thread.
    pub(crate) fn last(code: i32) -> Error {
        // SAFETY: returns a library-owned NUL-terminated string valid until the next failing
        // call on this thread; it is copied at once.
        let p = unsafe { sys::llmkv_last_error() };
        let message =
            if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
        Error { status: Status::from_code(code).unwrap_or(Status::Unknown(code)), message }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{}: {}", self.status, self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// `Ok(())` for LLMKV_OK, else the error with the thread's detail message.
#[inline]
pub(crate) fn check(code: i32) -> Result<()> {
    if code == sys::LLMKV_OK {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}

/// Converts to a C string; an interior NUL byte is InvalidArgument naming `what`.
pub(crate) fn cstring(what: &str, bytes: impl Into<Vec<u8>>) -> Result<std::ffi::CString> {
    std::ffi::CString::new(bytes).map_err(|e| {
        Error::new(
            Status::InvalidArgument,
            format!("{what} contains a NUL byte at offset {} (C strings cannot hold one)", e.nul_position()),
        )
    })
}
