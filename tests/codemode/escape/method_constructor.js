// expect-status: completed
// expect-result: "TypeError"
try { ({ m() {} }).m.constructor("return 1")(); "escaped" } catch (e) { e.name }
