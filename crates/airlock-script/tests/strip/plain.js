// plain JavaScript passes as written
const files = await codemode.glob({ pattern: "*.md" });
if (files.length > 1 && files[0] < files[1]) console.log("sorted");
return files.length;
