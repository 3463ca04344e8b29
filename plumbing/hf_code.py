"""What code a Hugging Face folder could lead transformers to run: refused before transformers is
asked (refuse_code: every reader of a folder calls it), or recognized as this project's own modeling
file where a command may say trust_remote_code=True (shipped_code); and what a command must not
write through (replace_problem). No code of a folder is ever run here.
"""

import os
import re
import stat

from plumbing.common import read_json
from configurator import UserError

# The JSON files transformers reads from a model folder (or the folder of a .gguf) whose fields can name
# classes (auto_map) or hold what it parses: each present one is read through read_json by refuse_code.
FOLDER_JSON = ("config.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
               "added_tokens.json", "chat_template.json", "processor_config.json", "preprocessor_config.json")


def auto_maps(value):
    """Every auto_map key in a JSON value, at any depth, as [(its dotted place, its value)], outermost
    first: transformers reads one wherever a nested config (text_config, decoder, ...) holds it.
    JSON keeps the last of a key given twice, and so does this (json.load's dict). Walked without
    recursion, so a value nested as deep as read_json allows is walked too."""
    found, stack = [], [(value, "")]
    while stack:
        v, where = stack.pop()
        items = v.items() if type(v) is dict else enumerate(v) if type(v) is list else ()
        for key, item in items:
            at = f"{where}[{key}]" if type(v) is list else f"{where}.{key}" if where else key
            if key == "auto_map" and type(v) is dict:
                found.append((at, item))
            stack.append((item, at))
    return sorted(found, key=lambda f: (f[0].count("."), f[0]))


def names_code(at, value):
    """Whether the auto_map at `at` (auto_maps' place) with `value` names code: any non-empty value
    does; null, {} and [] name none. UserError (one line) for a top-level null, which names no code
    but which transformers cannot read (it looks for class names in it: a TypeError)."""
    if value is None and at == "auto_map":
        raise UserError("auto_map=None names no code, but transformers looks for class names in it and fails on "
                        "null (a TypeError): delete the key (a JSON key given twice keeps the last)")
    return value not in (None, {}, [])


def code_maps(folder):
    """(path, place, value) of every auto_map that names code (names_code) in the FOLDER_JSON files
    present in folder, each read through read_json (a FIFO or device refused, a link to a file read);
    UserError (one line naming the file) for one that cannot be read or for a top-level null auto_map."""
    for name in FOLDER_JSON:
        path = os.path.join(folder, name)
        if not os.path.lexists(path):
            continue
        for at, value in auto_maps(read_json(path)):
            try:
                code = names_code(at, value)
            except UserError as e:
                raise UserError(f"{path}: {e}") from None
            if code:
                yield path, at, value


def refuse_code(folder, model_folder=True):
    """Refuse, before transformers is asked, a folder that could lead it to run the folder's own code
    (or a repository's): every reader of a Hugging Face folder calls this (read_config, so
    --hf_model and tools.hf_check; transformers_reading; tools.gguf_to_hf and tools.gguf_check on
    the folders they load). Each file of FOLDER_JSON present is read through read_json, so a
    damaged one is one line too. UserError (one line naming the file or value, and the fix) for:
    an auto_map naming anything, at any depth of any of them (a nested config's own, as
    text_config.auto_map; a null one names nothing, but transformers fails on it at the top level,
    which is said instead); and with model_folder (a model's own folder, not one a .gguf file
    merely lies in, such as a package's or a downloads folder, where transformers reads no code
    unless an auto_map names it), a *.py file in the folder, and a config.json model_type that is
    missing or, with transformers installed, not in its CONFIG_MAPPING (transformers would look for
    the folder's code to build it). Returns None."""
    fix = "this project never runs a folder's code (trust_remote_code=False): use a standard Llama or Qwen3 folder"
    for path, at, value in code_maps(folder):
        if model_folder:
            how = f"{fix} (save_pretrained from a model transformers builds itself), or delete {at} if " \
                  f"the model is one"
        else:
            how = "transformers reads this file beside the .gguf, and this project never runs a folder's code " \
                  f"(trust_remote_code=False): move the .gguf into a folder of its own, or delete {at} once " \
                  "you have read the code"
        raise UserError(f"{path}: {at}={short(value)} names code for transformers to run; {how}")
    if not model_folder:
        return
    for name in sorted(os.listdir(folder)):
        if name.lower().endswith(".py"):
            raise UserError(f"{os.path.join(folder, name)} is Python code in a model folder, which transformers "
                            f"can be led to run; {fix}, or move the file out of the folder once you have read it")
    problem = model_type_problem(folder)
    if problem:
        raise UserError(f"{problem}; {fix} (or upgrade transformers if it is a newer standard model)")


def model_type_problem(folder):
    """Why transformers could not build folder's config.json from its own classes (model_type missing,
    or not in its CONFIG_MAPPING: only the folder's code could), as a line naming the file; None
    when it can, when there is no config.json, or without transformers (nothing asks it then)."""
    path = os.path.join(folder, "config.json")
    if not os.path.lexists(path):
        return None  # (read_config says what is missing)
    model_type = read_json(path).get("model_type")
    if type(model_type) is not str or not model_type:
        return (f"{path}: model_type={short(model_type)} is not a model's name (save_pretrained writes one, as "
                f"'llama'): transformers cannot tell which model to build")
    try:  # only transformers knows its models; without it nothing here asks transformers anything
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return None
    if model_type not in CONFIG_MAPPING:
        return f"{path}: model_type={model_type!r} is not a model this transformers builds, so only the folder's own " \
               f"code could build it"
    return None


def shipped_code(folder, module):
    """Whether a command may tell transformers to trust folder's code (trust_remote_code=True): True
    when the only code the folder can lead transformers to is `module` (this project's own
    modeling file, tools/modeling_scalevec.py): config.json's top-level auto_map names only that
    module's classes, the folder's copy of it is a regular file byte-identical to `module`, and no
    other JSON file of FOLDER_JSON names code, at any depth, and no other *.py file lies anywhere
    in the folder. False when the folder holds no code and passes refuse_code (a standard model:
    nothing to trust). UserError (one line naming the file and why; the caller adds the fix)
    otherwise, and for a folder that is a symbolic link or not a folder."""
    name = os.path.basename(module)
    own = {"config.json": re.compile(re.escape(name.removesuffix(".py")) + r"\.[A-Za-z_]\w*")}
    if os.path.islink(folder) or not os.path.isdir(folder):
        what = f"a symbolic link (to {os.readlink(folder)})" if os.path.islink(folder) else "not a folder"
        raise UserError(f"{folder} is {what}: a command reads an export only in a folder of its own")
    ours = False
    for path, at, value in code_maps(folder):
        pattern = own.get(os.path.basename(path))
        if at != "auto_map" or pattern is None or type(value) is not dict or \
                not all(type(v) is str and pattern.fullmatch(v) for v in value.values()):
            raise UserError(f"{path}: {at}={short(value)} names code other than this project's {name}")
        ours = True
    for root, _, files in os.walk(folder):  # at any depth (a custom_generate/ folder's code too); no link followed
        for file in sorted(f for f in files if f.lower().endswith(".py")):
            path = os.path.join(root, file)
            if root != folder or file != name:
                raise UserError(f"{path} is Python code that is not this project's {name}")
            if os.path.islink(path) or not stat.S_ISREG(os.lstat(path).st_mode):
                raise UserError(f"{path} is a link or not a regular file, not a copy of this project's {name}")
            with open(path, "rb") as f, open(module, "rb") as g:
                if f.read() != g.read():
                    raise UserError(f"{path} differs from this project's {name} (edited, or from another version)")
            if not ours:
                raise UserError(f"{path} is shipped but config.json's auto_map does not name it (the folder was "
                                f"edited)")
    if ours and not os.path.isfile(os.path.join(folder, name)):
        raise UserError(f"{os.path.join(folder, 'config.json')}: its auto_map names {name}, which the folder lacks")
    problem = None if ours else model_type_problem(folder)
    if problem:
        raise UserError(problem)
    return ours


def replace_problem(path):
    """Why a command must not write or delete the file `path` as its own, as words after its name, or None
    (also when there is nothing there): a symbolic link (writing would go through it), a FIFO, a
    device or a folder, or a file with another hard link (st_nlink > 1: its bytes live elsewhere too)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {os.readlink(path)})"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, a device or a folder)"
    if st.st_nlink > 1:
        return f"has {st.st_nlink} hard links (its bytes are another name's too)"
    return None


def short(value, limit=80):
    """repr(value), cut to `limit` characters (a value from a file goes into one line)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
