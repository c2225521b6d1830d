// expect-status: completed
// expect-result: ["undefined","undefined","undefined","undefined"]
[typeof setTimeout, typeof setInterval, typeof setImmediate, typeof performance]
