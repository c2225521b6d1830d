// expect-status: completed
// expect-result: ["undefined","undefined","undefined"]
[typeof Error.prepareStackTrace, typeof Error.captureStackTrace, typeof Error.stackTraceLimit]
