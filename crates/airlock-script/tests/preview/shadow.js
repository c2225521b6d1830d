function run(codemode) { return codemode.exec({ command: "ls" }) }
run({ exec: () => 1 });
