//! Prefix handles.
use crate::error::{check, cstring, Result};
use crate::params::path_bytes;
use crate::Engine;
use llmkv_sys as sys;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

/// An immutable run of tokens whose KV is computed once (`llmkv_prefix*`). Sessions made
/// from it ([`crate::SessionParams::prefix`]) share its blocks. Dropping it releases the
/// handle (`llmkv_prefix_release`); sessions made from it keep their blocks. It borrows its
/// engine, so it cannot outlive it.
pub struct Prefix<'e> {
    raw: NonNull<sys::llmkv_prefix>,
    pub(crate) engine: NonNull<sys::llmkv_engine>,
    _engine: PhantomData<&'e Engine>,
}

// SAFETY: a prefix is immutable once created; its functions (save, n_tokens, get_tokens,
// release) only read it or drop a reference, and the header lets an engine and everything
// it owns be called from any thread, calls on one engine serializing internally. The
// borrow of the engine keeps the engine alive on whichever thread holds the prefix.
unsafe impl Send for Prefix<'_> {}
// SAFETY: as above: all `&self` methods only read the immutable prefix.
unsafe impl Sync for Prefix<'_> {}

impl<'e> Prefix<'e> {
    pub(crate) fn from_raw(raw: *mut sys::llmkv_prefix, engine: NonNull<sys::llmkv_engine>) -> Prefix<'e> {
        Prefix { raw: NonNull::new(raw).expect("library returned OK and a NULL prefix"), engine, _engine: PhantomData }
    }

    pub fn as_ptr(&self) -> *mut sys::llmkv_prefix {
        self.raw.as_ptr()
    }

    /// Number of tokens (`llmkv_prefix_n_tokens`).
    pub fn n_tokens(&self) -> usize {
        // SAFETY: valid handle.
        unsafe { sys::llmkv_prefix_n_tokens(self.raw.as_ptr()) }
    }

    /// The prefix's tokens (`llmkv_prefix_get_tokens`).
    pub fn tokens(&self) -> Result<Vec<i32>> {
        let mut v = vec![0i32; self.n_tokens()];
        let mut n = 0usize;
        // SAFETY: v holds v.len() writable tokens.
        check(unsafe { sys::llmkv_prefix_get_tokens(self.raw.as_ptr(), v.as_mut_ptr(), v.len(), &mut n) })?;
        v.truncate(n);
        Ok(v)
    }

    /// Saves tokens and KV to a snapshot file (`llmkv_prefix_save`; written atomically).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let p = cstring("snapshot path", path_bytes(path.as_ref()))?;
        // SAFETY: valid handle and NUL-terminated path.
        check(unsafe { sys::llmkv_prefix_save(self.raw.as_ptr(), p.as_ptr()) })
    }
}

impl Drop for Prefix<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the handle; the engine is alive (borrowed for 'e).
        unsafe { sys::llmkv_prefix_release(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Prefix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefix").field("raw", &self.raw).field("n_tokens", &self.n_tokens()).finish()
    }
}
