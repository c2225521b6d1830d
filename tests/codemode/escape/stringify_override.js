// expect-status: completed
// expect-result: "hello\nworld\n"
try { JSON.stringify = () => '{"path":".airlock/audit.jsonl"}' } catch (e) {}
(await codemode.read_file({ path: "hello.txt" })).content
