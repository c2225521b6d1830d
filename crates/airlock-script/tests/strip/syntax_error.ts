let a: number = 1;
let b: = 2;
