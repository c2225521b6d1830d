import fs = require("fs");
