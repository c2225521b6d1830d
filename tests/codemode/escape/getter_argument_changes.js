// expect-status: completed
// expect-result: [1,"hello\nworld\n"]
let reads = 0;
const args = { get path() { reads += 1; return reads === 1 ? "hello.txt" : ".airlock/audit.jsonl" } };
const r = await codemode.read_file(args);
[reads, r.content]
