const é: Température = 1; let ü = "ß";
const 名前: 型 = "値";
[é, ü, 名前]
