// expect-code: script_memory
const a = [];
for (;;) a.push({ n: a.length });
