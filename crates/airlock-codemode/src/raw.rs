//! The engine's only unsafe code, kept to the two things rquickjs has no
//! safe form for:
//!
//! - **Moving compiled code between contexts.** The run context is made
//!   without QuickJS's `Eval` intrinsic, so no path from a string to code
//!   exists in it at the C level (`eval`, and the `Function`,
//!   `AsyncFunction`, `GeneratorFunction` and `AsyncGeneratorFunction`
//!   constructors all end in the context's `eval_internal`, which only that
//!   intrinsic sets). The script is compiled in a second context of the same
//!   runtime that has it, written out as bytecode and read into the run
//!   context, where it runs with the run context's globals. The bytecode is
//!   made here from the script and never comes from outside.
//! - **Closing inherited descriptors.** The worker closes every descriptor
//!   above 2 before anything else: whatever started airlock may have passed
//!   some on (a jobserver's pipes, a terminal), and nothing in the new
//!   process owns them yet.
//! - **Counting the engine's memory.** An allocator that refuses an
//!   allocation crossing the limit and remembers that it did, so that a
//!   script that catches QuickJS's `out of memory` error still ends with
//!   `script_memory`.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::CString;
use std::rc::Rc;

use rquickjs::allocator::Allocator;
use rquickjs::{Ctx, Error, Value, qjs};

/// Closes every descriptor above 2 (`close_range(3, ~0, 0)`). Called first
/// thing in the worker's `main`, while no Rust value owns a descriptor.
pub(crate) fn close_inherited_descriptors() -> std::io::Result<()> {
    // SAFETY: a plain system call on descriptors nothing in this process
    // holds a handle to: the worker runs it before opening anything, and
    // std opened nothing beyond 0, 1 and 2 before `main`.
    let done = unsafe { libc::close_range(3, u32::MAX, 0) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Compiles `source` as a global script in `compiler`, a context with the
/// `Eval` intrinsic, without running it, and returns its bytecode. On a
/// syntax error the exception is pending in `compiler` (read it with
/// `Ctx::catch`) and the error is `Error::Exception`.
pub(crate) fn compile(
    compiler: &Ctx<'_>,
    source: &str,
    filename: &str,
    flags: u32,
) -> Result<Vec<u8>, Error> {
    // QuickJS wants the source NUL-terminated; a NUL inside is refused
    // before (`Engine::run`).
    let text = CString::new(source).map_err(|_| Error::Unknown)?;
    let name = CString::new(filename).map_err(|_| Error::Unknown)?;
    let ctx = compiler.as_raw().as_ptr();
    let flags = (flags | qjs::JS_EVAL_FLAG_COMPILE_ONLY) as i32;
    // SAFETY: `ctx` is a live context (borrowed through `compiler`); the
    // source and file name are NUL-terminated and outlive the call; the
    // returned value is owned by us and handed to `Value::from_raw`, whose
    // drop frees it.
    let compiled = unsafe {
        let value = qjs::JS_Eval(ctx, text.as_ptr(), source.len() as _, name.as_ptr(), flags);
        if qjs::JS_IsException(value) {
            return Err(Error::Exception);
        }
        Value::from_raw(compiler.clone(), value)
    };
    let mut size: qjs::size_t = 0;
    // SAFETY: `compiled` is a live function-bytecode value of this context;
    // `JS_WriteObject` returns a buffer of `size` bytes allocated with the
    // context's allocator (or null on failure), copied out and freed with
    // `js_free` on that context.
    unsafe {
        let buffer = qjs::JS_WriteObject(
            ctx,
            &mut size,
            compiled.as_raw(),
            qjs::JS_WRITE_OBJ_BYTECODE as i32,
        );
        if buffer.is_null() {
            return Err(Error::Exception);
        }
        let bytes = std::slice::from_raw_parts(buffer, size as usize).to_vec();
        qjs::js_free(ctx, buffer.cast());
        Ok(bytes)
    }
}

/// Reads bytecode made by [`compile`] (on the same runtime) into `ctx` and
/// runs it there: the code sees `ctx`'s globals. Returns the script's
/// completion value (a promise for an async script).
pub(crate) fn run_compiled<'js>(ctx: &Ctx<'js>, bytecode: &[u8]) -> Result<Value<'js>, Error> {
    let raw = ctx.as_raw().as_ptr();
    // SAFETY: `raw` is a live context; the buffer is bytecode this runtime
    // wrote (`compile`), valid for `len` bytes during the call. The function
    // object `JS_ReadObject` returns is consumed by `JS_EvalFunction`,
    // whose result we own and hand to `Value::from_raw`.
    unsafe {
        let function = qjs::JS_ReadObject(
            raw,
            bytecode.as_ptr(),
            bytecode.len() as _,
            qjs::JS_READ_OBJ_BYTECODE as i32,
        );
        if qjs::JS_IsException(function) {
            return Err(Error::Exception);
        }
        let result = qjs::JS_EvalFunction(raw, function);
        if qjs::JS_IsException(result) {
            return Err(Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), result))
    }
}

/// The engine's allocator: the C library's, with every byte counted against
/// `limit`. An allocation that would cross the limit fails (QuickJS then
/// throws `out of memory`) and sets `exceeded`, which the interrupt
/// handler turns into an uncatchable end of the run.
pub(crate) struct Counted {
    pub(crate) used: Rc<Cell<usize>>,
    pub(crate) exceeded: Rc<Cell<bool>>,
    pub(crate) limit: usize,
}

impl Counted {
    fn admits(&self, freed: usize, wanted: usize) -> bool {
        let admitted = self
            .used
            .get()
            .saturating_sub(freed)
            .checked_add(wanted)
            .is_some_and(|total| total <= self.limit);
        if !admitted {
            self.exceeded.set(true);
        }
        admitted
    }
}

// SAFETY: every pointer handed out comes from the C library's allocator,
// whose blocks are at least `usize`-aligned, and is released, resized and
// measured only through the same allocator.
unsafe impl Allocator for Counted {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.admits(0, size) {
            return std::ptr::null_mut();
        }
        // SAFETY: plain `malloc`; a null result is passed on.
        let block = unsafe { libc::malloc(size.max(1)) }.cast::<u8>();
        if !block.is_null() {
            // SAFETY: `block` came from `malloc` just now.
            self.used
                .set(self.used.get() + unsafe { Self::usable_size(block) });
        }
        block
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            self.exceeded.set(true);
            return std::ptr::null_mut();
        };
        if !self.admits(0, total) {
            return std::ptr::null_mut();
        }
        // SAFETY: plain `calloc`; a null result is passed on.
        let block = unsafe { libc::calloc(count.max(1), size.max(1)) }.cast::<u8>();
        if !block.is_null() {
            // SAFETY: `block` came from `calloc` just now.
            self.used
                .set(self.used.get() + unsafe { Self::usable_size(block) });
        }
        block
    }

    unsafe fn dealloc(&mut self, block: *mut u8) {
        // SAFETY: the caller passes a block of this allocator.
        let size = unsafe { Self::usable_size(block) };
        self.used.set(self.used.get().saturating_sub(size));
        // SAFETY: as above; freed once.
        unsafe { libc::free(block.cast()) };
    }

    unsafe fn realloc(&mut self, block: *mut u8, new_size: usize) -> *mut u8 {
        let old = if block.is_null() {
            0
        } else {
            // SAFETY: the caller passes a block of this allocator.
            unsafe { Self::usable_size(block) }
        };
        if !self.admits(old, new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: `block` is null or ours; on failure the old block stays
        // valid and counted.
        let moved = unsafe { libc::realloc(block.cast(), new_size.max(1)) }.cast::<u8>();
        if !moved.is_null() {
            // SAFETY: `moved` came from `realloc` just now.
            let new = unsafe { Self::usable_size(moved) };
            self.used.set(self.used.get().saturating_sub(old) + new);
        }
        moved
    }

    unsafe fn usable_size(block: *mut u8) -> usize {
        // SAFETY: the caller passes a block of this allocator (the C
        // library's).
        unsafe { libc::malloc_usable_size(block.cast()) }
    }
}
