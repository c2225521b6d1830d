// expect-code: script_memory
const keep = [];
for (;;) {
  try { keep.push("y".repeat(1 << 20) + keep.length) } catch (e) {}
}
