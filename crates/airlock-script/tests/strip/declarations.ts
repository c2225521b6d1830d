interface File {
  path: string;
  size?: number;
}
type Paths = string[]
declare const host: string;
declare function helper(x: number): void;
declare enum Mode { A, B }
declare namespace Lib { const x: number; }
namespace Types { export interface T { a: 1 } }
function over(a: string): string;
function over(a: number): number;
function over(a: any) { return a }
let value = over("x")
type Later = number
;[value].length
