// expect-code: script_memory
new Array(1e9).fill(0).length
