// expect-status: completed
// expect-result: ["undefined","undefined","undefined","undefined","undefined"]
[typeof WebAssembly, typeof SharedArrayBuffer, typeof Atomics, typeof WeakRef, typeof FinalizationRegistry]
