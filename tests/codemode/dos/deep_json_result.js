// expect-code: script_limit
let o = {};
for (let i = 0; i < 1e5; i++) o = { o };
o
