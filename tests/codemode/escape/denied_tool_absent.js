// expect-status: completed
// expect-result: ["undefined","undefined",false]
[typeof codemode.delete_file, typeof codemode.exec, "delete_file" in codemode]
