"""The training loop the PyTorch tests run, as program text: `epochs` passes over the DataLoader made by `loader`,
each step sleeping `body_time` after its batch came, keeping the program's own account (`waited` in next(),
`stepped` from the first ask until the last returned, on the intercept's clock) to compare with what the intercept
publishes."""

from __future__ import annotations

import textwrap


def timed_epochs(loader: str, epochs: int, body_time: float, after_epoch: str = "") -> str:
    """The loop's lines at the program's top level; `after_epoch` runs at the end of each epoch (indented code)."""
    loop = textwrap.dedent(f"""
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        waited = stepped = 0.0
        for epoch in range({epochs}):
            batches = iter({loader})
            first = time.perf_counter()
            while True:
                asked = time.perf_counter()
                try:
                    x, y = next(batches)
                except StopIteration:  # joining the workers is a wait for the loader too
                    ended = time.perf_counter()
                    waited += ended - asked
                    stepped += ended - first
                    break
                waited += time.perf_counter() - asked
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                time.sleep({body_time})
    """)
    return loop + textwrap.indent(textwrap.dedent(after_epoch), "    ")
