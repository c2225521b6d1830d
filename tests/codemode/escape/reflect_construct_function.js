// expect-status: completed
// expect-result: "TypeError"
try { Reflect.construct(Function, ["return 1"])(); "escaped" } catch (e) { e.name }
