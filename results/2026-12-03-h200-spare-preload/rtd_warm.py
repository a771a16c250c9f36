"""An experiment, imported by a spare through RTD_SPARE_IMPORTS: with one GPU
visible (the device any replacement on this node gets), make its context,
the allocator, a cuBLAS handle and a few kernels ahead."""
import torch

if torch.cuda.is_available() and torch.cuda.device_count() == 1:
    torch.cuda.set_device(0)
    a = torch.randn(512, 512, device="cuda", requires_grad=True)
    loss = torch.nn.functional.mse_loss(torch.nn.functional.gelu(a @ a), a.detach())
    loss.backward()
    torch.optim.AdamW([a]).step()
    torch.cuda.synchronize()
