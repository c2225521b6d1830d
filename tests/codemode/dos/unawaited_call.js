// expect-code: script_error
codemode.read_file({ path: "hello.txt" });
"done"
