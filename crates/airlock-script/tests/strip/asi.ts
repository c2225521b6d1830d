let a = 1
interface I { x: number }
(a)
let b = a
declare let c: number
[b].length
