// expect-status: completed
// expect-result: "TypeError"
try { (() => 1).constructor("return 1")(); "escaped" } catch (e) { e.name }
