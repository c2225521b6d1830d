// expect-status: completed
// expect-result: "hello\nworld\n"
try { codemode.read_file = async () => ({ content: "forged" }) } catch (e) {}
(await codemode.read_file({ path: "hello.txt" })).content
