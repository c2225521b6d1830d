// expect-status: completed
// expect-result: "ReferenceError"
try { await import("fs"); "escaped" } catch (e) { e.name }
