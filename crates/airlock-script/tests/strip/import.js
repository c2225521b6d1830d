import { readFile } from "fs";
