// expect-status: completed
// expect-result: ["undefined","undefined","undefined"]
[typeof require, typeof module, typeof exports]
