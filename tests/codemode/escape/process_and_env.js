// expect-status: completed
// expect-result: ["undefined","undefined","undefined","undefined","undefined"]
[typeof process, typeof Deno, typeof Bun, typeof std, typeof os]
