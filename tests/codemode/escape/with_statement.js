// expect-code: parse_error
with (codemode) { read_file({ path: "hello.txt" }) }
