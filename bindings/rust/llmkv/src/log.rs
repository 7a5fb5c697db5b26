//! The process-wide log callback (`llmkv_log_set`).
use llmkv_sys as sys;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `llmkv_log_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    fn raw(self) -> sys::llmkv_log_level {
        match self {
            LogLevel::Error => sys::LLMKV_LOG_ERROR,
            LogLevel::Warn => sys::LLMKV_LOG_WARN,
            LogLevel::Info => sys::LLMKV_LOG_INFO,
            LogLevel::Debug => sys::LLMKV_LOG_DEBUG,
        }
    }
}

/// A log receiver: a plain function (it holds no engine, so it cannot call back into one,
/// which the header forbids). It may run on any thread that calls into the library.
pub type LogFn = fn(LogLevel, &str);

static LOGGER: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn trampoline(level: sys::llmkv_log_level, message: *const c_char, _: *mut c_void) {
    let f = LOGGER.load(Ordering::Acquire);
    if f == 0 || message.is_null() {
        return;
    }
    // SAFETY: LOGGER only ever holds 0 or a `LogFn` stored by set_logger.
    let f: LogFn = unsafe { std::mem::transmute::<usize, LogFn>(f) };
    // SAFETY: the library passes a NUL-terminated message valid for the call.
    let msg = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    let level = match level {
        sys::LLMKV_LOG_ERROR => LogLevel::Error,
        sys::LLMKV_LOG_WARN => LogLevel::Warn,
        sys::LLMKV_LOG_INFO => LogLevel::Info,
        _ => LogLevel::Debug,
    };
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(|| f(level, &msg));
}

/// Installs `f` as the log receiver for messages up to `max_level`; `None` restores the
/// library's default (WARN and ERROR to stderr).
pub fn set_logger(f: Option<LogFn>, max_level: LogLevel) {
    LOGGER.store(f.map_or(0, |f| f as usize), Ordering::Release);
    let cb: sys::llmkv_log_fn = if f.is_some() { Some(trampoline) } else { None };
    // SAFETY: the trampoline is a valid callback for the life of the process.
    unsafe { sys::llmkv_log_set(cb, std::ptr::null_mut(), max_level.raw()) }
}
