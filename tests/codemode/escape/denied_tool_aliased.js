// expect-status: completed
// expect-result: ["undefined","undefined"]
const c = codemode;
const { move_file } = c;
const f = c["move" + "_file"];
[typeof move_file, typeof f]
