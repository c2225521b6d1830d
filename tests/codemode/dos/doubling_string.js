// expect-code: script_memory
let s = "x";
for (;;) s = s.repeat(2);
