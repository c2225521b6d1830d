let a = 1, b = 2;
let y = [a, b] as number[]
[a, b] = [b, a]
