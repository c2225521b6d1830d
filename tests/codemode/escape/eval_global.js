// expect-status: completed
// expect-result: ["undefined","undefined"]
[typeof eval, typeof globalThis.eval]
