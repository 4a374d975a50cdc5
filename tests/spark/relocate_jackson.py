#!/usr/bin/env python3
"""Copy Jackson jars with every class moved under Iceberg's relocation prefix.

The Iceberg Spark runtime jar the tests use refers to Jackson as
org.apache.iceberg.shaded.com.fasterxml.jackson.* but does not contain those
classes. This writes one jar holding Spark's own Jackson with the package
renamed in class names, in every class file's constant pool (names,
descriptors, signatures, string constants) and in service files.

  relocate_jackson.py OUT.jar IN.jar [IN.jar ...]
"""
import os
import struct
import sys
import zipfile

RENAMES = [
    (b"com/fasterxml/jackson/", b"org/apache/iceberg/shaded/com/fasterxml/jackson/"),
    (b"com.fasterxml.jackson.", b"org.apache.iceberg.shaded.com.fasterxml.jackson."),
]

# Sizes (tag byte included) of the constant pool entries other than UTF-8.
CONSTANT_SIZES = {3: 5, 4: 5, 5: 9, 6: 9, 7: 3, 8: 3, 9: 5, 10: 5, 11: 5, 12: 5,
                  15: 4, 16: 3, 17: 5, 18: 5, 19: 3, 20: 3}


def rename(data):
    for old, new in RENAMES:
        data = data.replace(old, new)
    return data


def relocate_class(data):
    """Rename inside the UTF-8 constants of a class file. Constants are referred to
    by index, never by byte offset, so their lengths may change."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    (count,) = struct.unpack(">H", data[8:10])
    parts, pos, index = [data[:10]], 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack(">H", data[pos + 1:pos + 3])
            text = rename(data[pos + 3:pos + 3 + length])
            if len(text) > 0xFFFF:
                raise ValueError("renamed constant too long")
            parts.append(b"\x01" + struct.pack(">H", len(text)) + text)
            pos += 3 + length
        else:
            size = CONSTANT_SIZES[tag]
            parts.append(data[pos:pos + size])
            pos += size
            if tag in (5, 6):  # long and double take two entries
                index += 1
        index += 1
    parts.append(data[pos:])
    return b"".join(parts)


def main():
    out, inputs = sys.argv[1], sys.argv[2:]
    if not inputs:
        sys.exit(__doc__)
    written = set()
    classes = 0
    with zipfile.ZipFile(out + ".part", "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for path in inputs:
            stem = os.path.basename(path)[:-len(".jar")]
            with zipfile.ZipFile(path) as src:
                for name in src.namelist():
                    if (name.endswith("/") or name == "META-INF/MANIFEST.MF"
                            or name.endswith("module-info.class")
                            or name.startswith(("META-INF/versions/", "META-INF/maven/"))):
                        continue
                    data = src.read(name)
                    if name.endswith(".class"):
                        data, name = relocate_class(data), rename(name.encode()).decode()
                        classes += 1
                    elif name.startswith("META-INF/services/"):
                        data, name = rename(data), rename(name.encode()).decode()
                    elif name.startswith("META-INF/"):
                        # licences and notices: kept apart per input jar
                        name = f"META-INF/{stem}/{name[len('META-INF/'):]}"
                    else:
                        name = rename(name.encode()).decode()
                    if name not in written:
                        written.add(name)
                        jar.writestr(name, data)
    os.replace(out + ".part", out)
    print(f"{out}: {classes} classes", file=sys.stderr)


if __name__ == "__main__":
    main()
