"""GGUF files the tests write (tests/tiny/test_gguf_export.py, tests/serve/test_engine.py)."""


def vocab_file(path, tokens, tokenizer="gpt2", add_bos=False, bos=11):
    """A GGUF file with a vocabulary and nothing else: what check_pair reads."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(tokenizer)
    writer.add_token_list(tokens)
    writer.add_add_bos_token(add_bos)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(bos)
    writer.add_add_eos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
